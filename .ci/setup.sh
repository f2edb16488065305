#!/bin/sh
# Installs the Debian 12 packages mxlab needs to build and test (only those missing).
set -eu
# Qt 6 and QCustomPlot draw the plots (offscreen: fonts must be installed); toml++ reads experiment files;
# SQLite keeps their results; Eigen runs the training GEMMs on Fashion-MNIST (its Debian package); RE2 matches
# the re: name patterns in linear time; Slurm and munge run the job-array test (tests/slurm: a single-node
# cluster the test starts and stops itself). pybind11 and Debian's Python 3 (/usr/bin/python3) build the mxlab
# package; numpy, pytest, PyTorch and pandas run its tests and examples; OpenBLAS replaces the reference BLAS
# that PyTorch's and numpy's matrix products use (five times faster for the training example), and its pthread
# variant's SGEMM (libopenblas-dev) runs the trainer's float32 products with the kernel it picks for the CPU.
PACKAGES="g++ cmake ninja-build pkg-config git catch2 libboost-dev libhwy-dev zlib1g-dev nlohmann-json3-dev
  qt6-base-dev libqcustomplot-dev fontconfig fonts-dejavu-core libtomlplusplus-dev libsqlite3-dev
  libeigen3-dev dataset-fashion-mnist libre2-dev slurm-wlm munge
  python3-dev pybind11-dev python3-numpy python3-pytest python3-torch python3-pandas libopenblas0-pthread
  libopenblas-dev libopenblas-pthread-dev"
missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "installing:$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
