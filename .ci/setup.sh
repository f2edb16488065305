#!/bin/sh
# Installs the Debian 12 packages mxlab needs to build and test (only those missing).
set -eu
PACKAGES="g++ cmake ninja-build pkg-config git catch2 libboost-dev libhwy-dev zlib1g-dev nlohmann-json3-dev"
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
