#include "common/daemon/flags.h"

#include <gflags/gflags.h>

#include <fnmatch.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "pushpull/version.h"

DECLARE_bool(help);
DECLARE_bool(helpshort);
DECLARE_bool(version);

namespace pushpull {

namespace {

// gflags exits 1 on a flag it does not know or a value it cannot parse, the code this project's
// binaries use for a failed job (pushpull-launch restarts those): both are bad flags, exit 2,
// caught first.
bool ValueParses(const std::string& type, const std::string& v) {
  if (type == "string") return true;
  if (v.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const int base = v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X') ? 16 : 10;  // as gflags reads them
  if (type == "double") {
    (void)std::strtod(v.c_str(), &end);
  } else if (type == "bool") {
    std::string l;
    for (char ch : v) l += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (const char* ok : {"true", "false", "t", "f", "yes", "no", "y", "n", "1", "0"})
      if (l == ok) return true;
    return false;
  } else if (type == "uint32" || type == "uint64") {
    if (v[0] == '-') return false;
    (void)std::strtoull(v.c_str(), &end, base);
  } else {  // int32, int64
    const long long x = std::strtoll(v.c_str(), &end, base);
    if (type == "int32" && (x < INT32_MIN || x > INT32_MAX)) return false;
  }
  return errno == 0 && end != nullptr && *end == '\0';
}

[[noreturn]] void Refuse(const char* prog, const std::string& why) {
  std::fprintf(stderr, "%s: %s (see --help)\n", prog, why.c_str());
  std::exit(2);
}

std::set<std::string> SplitCommas(const std::string& v) {
  std::set<std::string> out;
  size_t b = 0;
  while (b <= v.size()) {
    const size_t e = std::min(v.find(',', b), v.size());
    if (e > b) out.insert(v.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

// The flags in a --flagfile that apply to this program, as gflags reads them: a line at a time,
// leading blanks skipped, "#" comments and blank lines ignored; a line not starting with '-' is a
// list of program-name globs, and the flag lines after it apply only where one matches argv[0]
// or its base name.
std::vector<std::string> FlagfileArgs(const char* prog, const std::string& path) {
  std::ifstream in(path);
  if (!in) Refuse(prog, "--flagfile=" + path + ": cannot open it");
  const std::string argv0 = prog, base = argv0.substr(argv0.rfind('/') + 1);
  std::vector<std::string> args;
  bool relevant = true, in_names = false;
  std::string line;
  while (std::getline(in, line)) {
    const size_t b = line.find_first_not_of(" \t\r\f\v");
    if (b == std::string::npos) continue;
    line = line.substr(b, line.find('\r', b) == std::string::npos ? std::string::npos : line.find('\r', b) - b);
    if (line[0] == '#') continue;
    if (line[0] == '-') {
      in_names = false;
      if (relevant) args.push_back(line);
      continue;
    }
    if (!in_names) relevant = false;
    in_names = true;
    size_t w = 0;
    while (!relevant && w <= line.size()) {
      const size_t e = std::min(line.find(' ', w), line.size());
      const std::string glob = line.substr(w, e - w);
      relevant = !glob.empty() && (fnmatch(glob.c_str(), argv0.c_str(), FNM_PATHNAME) == 0 ||
                                   fnmatch(glob.c_str(), base.c_str(), FNM_PATHNAME) == 0);
      w = e + 1;
    }
  }
  return args;
}

struct FlagCheck {
  const char* prog;
  std::set<std::string> refused;                             // defined, but not this binary's
  std::set<std::string> undefok;                             // gflags' --undefok, from anywhere
  std::vector<std::pair<std::string, std::string>> unknown;  // name, as written (+ where)
};

// Checks args (from the command line, or a flagfile named `source`, whose lines are one flag
// each) against the flags defined; unknown ones are judged at the end, against every --undefok.
void CheckArgs(FlagCheck* fc, const std::vector<std::string>& args, const std::string& source, int depth) {
  const char* prog = fc->prog;
  const std::string in = source.empty() ? "" : " in --flagfile=" + source;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--" && source.empty()) break;  // what follows is another program's (pushpull-launch's workers')
    if (a.size() < 2 || a[0] != '-') continue;
    std::string name = a.substr(a[1] == '-' ? 2 : 1);
    const size_t eq = name.find('=');
    const bool has_value = eq != std::string::npos;
    std::string value = has_value ? name.substr(eq + 1) : "";
    name = name.substr(0, eq);
    gflags::CommandLineFlagInfo info;
    const auto known = [fc](const std::string& n, gflags::CommandLineFlagInfo* i) {
      return fc->refused.count(n) == 0 && gflags::GetCommandLineFlagInfo(n.c_str(), i);
    };
    if (known(name, &info)) {
      if (!has_value && info.type != "bool") {
        if (!source.empty()) Refuse(prog, "flag --" + name + in + " needs a value (--" + name + "=VALUE)");
        if (i + 1 >= args.size()) Refuse(prog, "flag --" + name + " needs a value");
        value = args[++i];  // "--flag value"
      } else if (!has_value) {
        continue;  // --boolflag
      }
      if (!ValueParses(info.type, value)) Refuse(prog, "--" + name + "=" + value + in + " is not a valid " + info.type);
      if (name == "undefok") {
        for (const std::string& n : SplitCommas(value)) fc->undefok.insert(n);
      } else if (name == "flagfile") {
        if (depth > 8) Refuse(prog, "--flagfile=" + value + ": flagfiles nested more than 8 deep");
        for (const std::string& f : SplitCommas(value)) CheckArgs(fc, FlagfileArgs(prog, f), f, depth + 1);
      }
      continue;
    }
    if (!has_value && name.rfind("no", 0) == 0 && known(name.substr(2), &info) && info.type == "bool")
      continue;  // --noflag
    fc->unknown.emplace_back(name, a + in);
  }
}

void RefuseBadFlags(int argc, char** argv, const FlagSelection& flags, const char* hint) {
  FlagCheck fc{argv[0], {flags.refused.begin(), flags.refused.end()}, {}, {}};
  CheckArgs(&fc, std::vector<std::string>(argv + 1, argv + argc), "", 0);
  for (const auto& [name, written] : fc.unknown) {
    if (fc.undefok.count(name) || (name.rfind("no", 0) == 0 && fc.undefok.count(name.substr(2)))) continue;
    Refuse(argv[0], "unknown flag " + written + (*hint ? std::string("; ") + hint : std::string()));
  }
}

std::string DirOf(const std::string& path) { return path.substr(0, path.find_last_of('/') + 1); }

// --help, as gflags' ShowUsageWithFlagsRestrict writes it (the usage, then the flags grouped by
// the file that defines them), of the flags `flags` selects: the shared ones first, then the
// binary's own (which a usage may say end with a file of their own).
void ShowHelp(const char* argv0, const FlagSelection& flags) {
  const std::string prog = argv0;
  std::printf("%s: %s\n", prog.substr(prog.rfind('/') + 1).c_str(), gflags::ProgramUsage());
  const std::set<std::string> shared(flags.shared.begin(), flags.shared.end());
  const std::set<std::string> refused(flags.refused.begin(), flags.refused.end());
  std::vector<gflags::CommandLineFlagInfo> all;
  gflags::GetAllFlags(&all);  // by file, then name
  auto own = [&](const gflags::CommandLineFlagInfo& info) {
    return std::strstr(info.filename.c_str(), flags.flag_file) != nullptr;
  };
  std::stable_partition(all.begin(), all.end(), [&](const auto& info) { return !own(info); });
  std::string last_file;
  bool first_dir = true;
  for (gflags::CommandLineFlagInfo& info : all) {
    if ((!own(info) && shared.count(info.name) == 0) || refused.count(info.name) != 0) continue;
    if (info.filename != last_file) {
      if (DirOf(info.filename) != DirOf(last_file)) {
        if (!first_dir) std::printf("\n\n");
        first_dir = false;
      }
      std::printf("\n  Flags from %s:\n", info.filename.c_str());
      last_file = info.filename;
    }
    if (auto p = flags.help_prefix.find(info.name); p != flags.help_prefix.end())
      info.description = p->second + info.description;
    std::fputs(gflags::DescribeOneFlag(info).c_str(), stdout);
  }
}

}  // namespace

void ParseFlagsOrHelp(int* argc, char*** argv, const char* usage, const char* flag_file, bool remove_flags,
                      const char* unknown_flag_hint) {
  FlagSelection flags;
  flags.flag_file = flag_file;
  ParseFlagsOrHelp(argc, argv, usage, flags, remove_flags, unknown_flag_hint);
}

void ParseFlagsOrHelp(int* argc, char*** argv, const char* usage, const FlagSelection& flags, bool remove_flags,
                      const char* unknown_flag_hint) {
  RefuseBadFlags(*argc, *argv, flags, unknown_flag_hint);
  gflags::SetUsageMessage(usage);
  gflags::ParseCommandLineNonHelpFlags(argc, argv, remove_flags);
  if (FLAGS_help || FLAGS_helpshort) {
    ShowHelp((*argv)[0], flags);
    std::exit(0);
  }
  if (FLAGS_version) {
    const std::string name = (*argv)[0];
    std::printf("%s %s\n", name.substr(name.rfind('/') + 1).c_str(), Version());
    std::exit(0);
  }
  gflags::HandleCommandLineHelpFlags();
}

void RefuseArguments(int argc, char** argv) {
  if (argc <= 1) return;
  std::fprintf(stderr, "%s: unexpected argument '%s' (flags are written --name=value); see --help\n", argv[0], argv[1]);
  std::exit(2);
}

std::string ExecutableDir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = 0;
  std::string p(buf);
  return p.substr(0, p.rfind('/'));
}

}  // namespace pushpull
