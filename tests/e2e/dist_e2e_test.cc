// The relocatable bundle (`make dist`, tools/make_dist.sh), as someone else's machine gets it:
// unpacked under a path with a space, every command runs with an empty environment, every ELF
// finds its libraries inside the bundle or in the system runtime, no ELF needs a newer glibc than
// the README's minimum, and `run` records a pyenv Python's phases through the bundled package.
//
// $STALLSCOPE_DIST_TARBALL names the tarball (`make test-dist` builds it and sets it); without
// it every test skips.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "subprocess.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using stallscope::testing::ProcessOutput;
using stallscope::testing::RunProcess;
using stallscope::testing::Slurp;
using stallscope::testing::TempDir;

// README "Bundle": the minimum glibc, and the libstdc++ the bundled libsimdjson needs (GCC 5).
constexpr const char* kMaxGlibc = "2.34";
constexpr const char* kMaxGlibcxx = "3.4.21";

// What the bundle may take from the machine: glibc and the GCC runtime. libstdc++ only for the
// bundled third-party libraries (lib/*.so*), never for our own ELFs.
const std::set<std::string> kSystemLibs = {"libc.so.6",           "libm.so.6",  "libdl.so.2",
                                           "libpthread.so.0",     "librt.so.1", "libgcc_s.so.1",
                                           "ld-linux-x86-64.so.2"};
constexpr const char* kLibstdcxx = "libstdc++.so.6";

/// "2.34" < "2.36", "3.4.9" < "3.4.21".
bool VersionLessOrEqual(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string pa, pb;
  while (true) {
    bool more_a = static_cast<bool>(std::getline(sa, pa, '.'));
    bool more_b = static_cast<bool>(std::getline(sb, pb, '.'));
    if (!more_a || !more_b) return !more_a;
    if (std::stoi(pa) != std::stoi(pb)) return std::stoi(pa) < std::stoi(pb);
  }
}

bool IsElf(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in && magic[0] == '\x7f' && std::string(magic + 1, 3) == "ELF";
}

class Dist : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* tarball = std::getenv("STALLSCOPE_DIST_TARBALL");
    if (tarball == nullptr || *tarball == '\0') return;
    given_ = tarball;
    // The space in the path: the rpath ($ORIGIN), the exe lookup and `run`'s PYTHONPATH must
    // all survive it.
    unpacked_ = std::make_unique<TempDir>("stallscope dist test");
    const fs::path& dir = unpacked_->path();
    ProcessOutput tar = RunProcess({"/bin/tar", "-xzf", given_, "-C", dir.string()}, {}, dir, 120);
    if (tar.exit_code != 0) return;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.is_directory()) root_ = entry.path();  // the tarball's one top directory
    }
    fs::create_directories(scratch());
  }
  static void TearDownTestSuite() { unpacked_.reset(); }

  void SetUp() override {
    if (given_.empty()) GTEST_SKIP() << "STALLSCOPE_DIST_TARBALL not set (make test-dist)";
    ASSERT_FALSE(root_.empty()) << "could not unpack " << given_;
  }

  /// Where commands' stdout/stderr files and test inputs go: beside the bundle.
  static fs::path scratch() { return unpacked_->path() / "io"; }

  /// Runs argv with `env` (empty: as under `env -i`).
  static ProcessOutput Run(const std::vector<std::string>& argv,
                           const std::vector<std::string>& env = {}, double timeout_s = 60) {
    return RunProcess(argv, env, scratch(), timeout_s);
  }

  static std::string Bin() { return (root_ / "bin" / "stallscope").string(); }

  static std::vector<fs::path> Elfs() {
    std::vector<fs::path> elfs;
    for (const auto& entry : fs::recursive_directory_iterator(root_)) {
      if (entry.is_regular_file() && IsElf(entry.path())) elfs.push_back(entry.path());
    }
    std::sort(elfs.begin(), elfs.end());
    return elfs;
  }

  /// True for the bundled third-party libraries (lib/<soname>), false for our own ELFs.
  static bool ThirdParty(const fs::path& elf) { return elf.parent_path() == root_ / "lib"; }

  static std::string given_;
  static std::unique_ptr<TempDir> unpacked_;
  static fs::path root_;
};

std::string Dist::given_;
std::unique_ptr<TempDir> Dist::unpacked_;
fs::path Dist::root_;

TEST_F(Dist, HasTheDocumentedLayout) {
  for (const char* rel :
       {"bin/stallscope", "bin/stallscope-gpu-check", "bin/stallscope-nvml-cost",
        "lib/libsimdjson.so.14", "lib/stallscope/python/sitecustomize.py",
        "lib/stallscope/python/stallscope/__init__.py",
        "lib/stallscope/python/stallscope/libstallscope_rec.so",
        "lib/stallscope/demo-gpu/libnvidia-ml.so.1", "lib/stallscope/demo-gpu/scenario.json",
        "examples/train.py", "README.md", "docs/commands/run.md", "VERSION", "Makefile"}) {
    EXPECT_TRUE(fs::exists(root_ / rel)) << rel;
  }
  bool wheel = false;
  for (const auto& entry : fs::recursive_directory_iterator(root_)) {
    std::string name = entry.path().filename().string();
    EXPECT_EQ(name.rfind("_core", 0), std::string::npos) << entry.path();  // 3.11-only extension
    EXPECT_NE(name, "__pycache__") << entry.path();
    wheel |= entry.path().extension() == ".whl";
  }
  EXPECT_TRUE(wheel);
  EXPECT_EQ(root_.filename().string().rfind("stallscope-", 0), 0u) << root_;
}

TEST_F(Dist, VersionAndTopRunWithAnEmptyEnvironment) {
  ProcessOutput version = Run({Bin(), "--version"});
  ASSERT_EQ(version.exit_code, 0) << version.err;
  // stallscope-0.1.0-linux-x86_64 prints "stallscope 0.1.0".
  std::string dir = root_.filename().string();
  std::string v = dir.substr(11, dir.find("-linux") - 11);
  EXPECT_EQ(version.out, "stallscope " + v + "\n");

  ProcessOutput top = Run({Bin(), "top", "--once"});
  EXPECT_EQ(top.exit_code, 0) << top.err;
  EXPECT_NE(top.out.find("CPU"), std::string::npos) << top.out;
  ProcessOutput top_json = Run({Bin(), "top", "--once", "--json"});
  ASSERT_EQ(top_json.exit_code, 0) << top_json.err;
  EXPECT_EQ(json::parse(top_json.out)["header"]["tool"], "stallscope " + v);

  // Through a symbolic link elsewhere (a PATH entry): $ORIGIN is the real directory.
  fs::path link = scratch() / "stallscope-link";
  fs::remove(link);
  fs::create_symlink(Bin(), link);
  ProcessOutput linked = Run({link.string(), "--version"});
  EXPECT_EQ(linked.exit_code, 0) << linked.err;
}

// Issue 41: the fake NVML ships as a clearly named demo device, loaded only when asked.
TEST_F(Dist, TopDemoShowsTheBundledDemoGpusAndNothingElseLoadsThem) {
  ProcessOutput demo = Run({Bin(), "top", "--once", "--json", "--demo"});
  ASSERT_EQ(demo.exit_code, 0) << demo.err;
  const json doc = json::parse(demo.out);
  std::vector<std::string> names;
  for (const auto& gpu : doc["header"]["gpus"]) names.push_back(gpu["gpu_name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"DEMO GPU 0 (fake NVML)", "DEMO GPU 1 (fake NVML)"}));
  EXPECT_NE(demo.err.find("demo GPUs: stallscope's fake NVML, not real hardware ("),
            std::string::npos)
      << demo.err;
  EXPECT_NE(demo.err.find((root_ / "lib" / "stallscope" / "demo-gpu").string() + ")\n"),
            std::string::npos)
      << demo.err;
  ProcessOutput plain = Run({Bin(), "top", "--once", "--json"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("DEMO"), std::string::npos) << plain.out;
}

TEST_F(Dist, TraceReadsGzipThroughTheBundledLibraries) {
  // simdjson (bundled .so) parses, zlib (linked in) inflates.
  fs::path gz = scratch() / "trace.json.gz";
  ProcessOutput zip =
      RunProcess({"/bin/gzip", "-c",
                  std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/traces/steps_kineto_gpu.json"},
                 {}, scratch(), 30);
  ASSERT_EQ(zip.exit_code, 0);
  fs::rename(scratch() / "stdout", gz);
  ProcessOutput trace = Run({Bin(), "trace", "--json", gz.string()});
  ASSERT_EQ(trace.exit_code, 0) << trace.err;
  json doc = json::parse(trace.out);
  EXPECT_GT(doc["ranks"][0]["kernels"]["count"].get<int>(), 0);
}

TEST_F(Dist, EveryLibraryResolvesInsideTheBundleOrToTheSystemRuntime) {
  std::vector<fs::path> elfs = Elfs();
  ASSERT_GE(elfs.size(), 4u);  // the two binaries, libstallscope_rec.so, libsimdjson
  bool simdjson_inside = false;
  for (const fs::path& elf : elfs) {
    ProcessOutput ldd = Run({"/usr/bin/ldd", elf.string()});
    ASSERT_EQ(ldd.exit_code, 0) << elf << ldd.err;
    std::istringstream lines(ldd.out);
    for (std::string line; std::getline(lines, line);) {
      size_t arrow = line.find(" => ");
      if (arrow == std::string::npos) continue;  // linux-vdso, the loader's own line
      std::string name = line.substr(line.find_first_not_of(" \t"));
      name = name.substr(0, name.find(' '));
      std::string target = line.substr(arrow + 4);
      EXPECT_EQ(target.find("not found"), std::string::npos) << elf << ": " << line;
      target = target.substr(0, target.find(" ("));
      if (target.rfind(root_.string() + "/", 0) == 0) {
        simdjson_inside |= name == "libsimdjson.so.14";
        continue;
      }
      // stallscope-full takes libstdc++ through libsimdjson; stallscope (record) none at all.
      // A bundled library on its own (no rpath) finds its bundled neighbours on the system; in
      // the process, the binary's DT_RPATH (checked above through the binaries' own ldd) puts
      // the bundle's copy first (libncursesw → libtinfo).
      bool allowed = kSystemLibs.count(name) > 0 || (name == kLibstdcxx && ThirdParty(elf)) ||
                     (name == kLibstdcxx && elf.filename() == "stallscope-full") ||
                     (ThirdParty(elf) && fs::exists(root_ / "lib" / name));
      EXPECT_TRUE(allowed) << elf << " takes " << name << " from " << target;
    }
  }
  EXPECT_TRUE(simdjson_inside) << "libsimdjson must resolve to the bundle's lib/";
}

TEST_F(Dist, SymbolVersionsStayWithinTheDocumentedMinimum) {
  for (const fs::path& elf : Elfs()) {
    ProcessOutput needed = Run({"/usr/bin/objdump", "-p", elf.string()});
    ASSERT_EQ(needed.exit_code, 0) << elf;
    if (!ThirdParty(elf)) {
      // Ours carry their own C++ runtime: any libstdc++ (or none) on the target will do.
      EXPECT_EQ(needed.out.find(kLibstdcxx), std::string::npos) << elf << " needs libstdc++";
    }
    ProcessOutput symbols = Run({"/usr/bin/objdump", "-T", elf.string()});
    ASSERT_EQ(symbols.exit_code, 0) << elf;
    // The highest "(GLIBC_2.34)" / "(GLIBCXX_3.4.21)" of the dynamic symbol table.
    std::string glibc = "0", glibcxx = "0";
    std::istringstream words(symbols.out);
    for (std::string word; words >> word;) {
      for (auto [prefix, highest] : {std::pair{"(GLIBC_", &glibc}, {"(GLIBCXX_", &glibcxx}}) {
        std::string_view p = prefix;
        if (word.rfind(p, 0) != 0 || word.back() != ')') continue;
        std::string version = word.substr(p.size(), word.size() - p.size() - 1);
        if (!VersionLessOrEqual(version, *highest)) *highest = version;
      }
    }
    EXPECT_TRUE(VersionLessOrEqual(glibc, kMaxGlibc)) << elf << " needs GLIBC_" << glibc;
    EXPECT_TRUE(VersionLessOrEqual(glibcxx, kMaxGlibcxx)) << elf << " needs GLIBCXX_" << glibcxx;
  }
}

/// pyenv's 3.12 where there is one, else its newest CPython >= 3.8, else Debian's python3.
std::string AnotherPython() {
  const char* root = std::getenv("PYENV_ROOT");
  const char* home = std::getenv("HOME");
  fs::path versions = root != nullptr
                          ? fs::path(root) / "versions"
                          : fs::path(home != nullptr ? home : "/root") / ".pyenv" / "versions";
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(versions, ec)) {
    std::string v = entry.path().filename().string();
    fs::path python = entry.path() / "bin" / "python3";
    if (v.rfind("3.", 0) == 0 && std::stoi(v.substr(2)) >= 8 && fs::exists(python, ec)) {
      if (v.rfind("3.12", 0) == 0) return python.string();
      found.push_back(python.string());
    }
  }
  std::sort(found.begin(), found.end());
  return found.empty() ? "/usr/bin/python3" : found.back();
}

TEST_F(Dist, RunRecordsPhasesOfAnotherPythonThroughTheBundledPackage) {
  std::string python = AnotherPython();
  fs::path job = scratch() / "job.py";
  std::ofstream(job) << "import time, stallscope\n"
                        "print('package', stallscope.__file__, flush=True)\n"
                        "for _ in range(30):\n"
                        "    with stallscope.phase('data_loading'):\n"
                        "        time.sleep(0.004)\n"
                        "    with stallscope.phase('forward_pass'):\n"
                        "        time.sleep(0.002)\n"
                        "    stallscope.step()\n";
  fs::path run_dir = scratch() / "run";
  fs::remove_all(run_dir);
  ProcessOutput run = Run({Bin(), "run", "--out", run_dir.string(), "-i", "200ms", "--quiet", "--",
                           python, job.string()},
                          {}, 120);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  std::string package = (root_ / "lib" / "stallscope" / "python" / "stallscope").string();
  EXPECT_NE(run.out.find("package " + package + "/__init__.py"), std::string::npos) << run.out;

  json report = json::parse(Slurp(run_dir / "report.json"));
  // Every step recorded: the steady ones, each with its data_loading, and the warm-up.
  const int steady = report["steps"]["count"];
  EXPECT_EQ(steady + report["life"]["warmup_steps"].get<int>(), 30) << report["steps"];
  int data_loading = 0;
  for (const auto& phase : report["phases"]) {
    if (phase["name"] == "data_loading") data_loading = phase["count"].get<int>();
  }
  EXPECT_EQ(data_loading, steady);
  ASSERT_FALSE(report["python"].empty());
  EXPECT_EQ(report["python"][0]["executable"], python);
  EXPECT_EQ(report["python"][0]["backend"], "native") << report["python"][0];
}

TEST_F(Dist, GpuCheckStopsAtNoGpuHere) {
  // The bundle's check with the bundle's binary (its default), NVML made unloadable.
  ProcessOutput check = Run({"/usr/bin/python3", (root_ / "bin" / "stallscope-gpu-check").string(),
                             "--out", (scratch() / "gpu-check").string()},
                            {"STALLSCOPE_NVML_LIB=/nonexistent/libnvidia-ml.so.1"}, 120);
  EXPECT_EQ(check.exit_code, 3) << check.out << check.err;
  EXPECT_NE(check.out.find("no NVIDIA GPU: "), std::string::npos) << check.out;
}

}  // namespace
