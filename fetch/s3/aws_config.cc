#include "fetch/s3/aws_config.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

namespace aprfs {
namespace {

// ---------------------------------------------------------------------------------------------
// Text helpers

bool IsSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

std::string_view Trim(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
  return text;
}

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// ---------------------------------------------------------------------------------------------
// The shared files, parsed as botocore parses them: Python's RawConfigParser (top-level keys
// lowercased, `=` or `:` between key and value, a line indented deeper than its key continues
// the key's value, a section or key twice in one file is an error), then botocore's nested
// sub-sections: a value that starts on the line after its key is a block of `key = value` lines.

struct SubValue {
  std::string value;
  int line = 0;
};

struct IniValue {
  std::string value;  // continuation lines joined with '\n', as configparser joins them
  bool nested = false;
  std::map<std::string, SubValue> sub;  // when nested; keys keep their case, as in botocore
  int line = 0;
  std::vector<std::pair<std::string, int>> more;  // continuation lines, until Finish
};

using IniSection = std::map<std::string, IniValue>;

struct IniFile {
  std::string path;
  std::vector<std::pair<std::string, IniSection>> sections;  // in file order
};

// The part of a line before its comment. Whole-line comments start with '#' or ';'; inline ones
// need whitespace before them (configparser's inline rule) so "http://host/#x" keeps its '#'.
std::string_view StripComment(std::string_view line) {
  std::string_view text = Trim(line);
  if (!text.empty() && (text.front() == '#' || text.front() == ';')) return {};
  for (size_t i = 1; i < line.size(); ++i) {
    if ((line[i] == '#' || line[i] == ';') && IsSpace(line[i - 1])) return line.substr(0, i);
  }
  return line;
}

size_t Indent(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && IsSpace(line[i])) ++i;
  return i;
}

class IniParser {
 public:
  explicit IniParser(std::string path) { file_.path = std::move(path); }

  void Line(std::string_view line, int number) {
    if (Trim(line).empty()) {
      // A blank line belongs to the value being read: blocks may have blank lines inside.
      if (option_ != nullptr) option_->more.emplace_back("", number);
      return;
    }
    std::string_view text = Trim(StripComment(line));
    if (text.empty()) return;
    size_t indent = Indent(line);
    if (option_ != nullptr && indent > indent_) {
      option_->more.emplace_back(std::string(text), number);
      return;
    }
    indent_ = indent;
    size_t close = text.rfind(']');
    if (text.front() == '[' && close != std::string_view::npos && close >= 2) {
      Header(std::string(text.substr(1, close - 1)), number);
    } else {
      Option(text, number);
    }
  }

  IniFile Finish() {
    for (auto& [name, section] : file_.sections) {
      for (auto& [key, value] : section) FinishValue(value);
    }
    ApplyDefaults();
    return std::move(file_);
  }

 private:
  // Names the line only: its text may hold a key.
  [[noreturn]] void Fail(int number, const std::string& what) const {
    throw AwsConfigError(file_.path + " line " + std::to_string(number) + ": " + what);
  }

  // configparser's SECTCRE: the name runs to the last ']' and is taken as is, spaces included.
  void Header(std::string name, int number) {
    option_ = nullptr;
    section_name_ = name;
    for (auto& [existing, section] : file_.sections) {
      if (existing != name) continue;
      // configparser lets [DEFAULT] come back; any other section twice is an error.
      if (name != "DEFAULT") Fail(number, "section [" + name + "] appears twice");
      section_ = &section;
      return;
    }
    file_.sections.emplace_back(std::move(name), IniSection{});
    section_ = &file_.sections.back().second;
  }

  void Option(std::string_view text, int number) {
    if (section_ == nullptr) Fail(number, "a setting before the first [section]");
    size_t equals = text.find_first_of("=:");
    if (equals == std::string_view::npos) {
      Fail(number, "expected `[section]`, `key = value` or a comment (# or ;)");
    }
    std::string key = Lower(std::string(Trim(text.substr(0, equals))));
    if (key.empty()) Fail(number, "a setting without a name before its `=`");
    if (auto first = section_->find(key); first != section_->end()) {
      // The key is not named: a mangled line may have made a secret the key.
      Fail(number, "a key of line " + std::to_string(first->second.line) + " appears twice in [" +
                       section_name_ + "]");
    }
    IniValue& value = (*section_)[key];
    value.value = std::string(Trim(text.substr(equals + 1)));
    value.line = number;
    option_ = &value;
  }

  // botocore's rule: a value that is empty on its key's line and continues below is a block.
  void FinishValue(IniValue& value) {
    bool block =
        value.value.empty() && std::any_of(value.more.begin(), value.more.end(),
                                           [](const auto& line) { return !line.first.empty(); });
    if (block) {
      value.nested = true;
      for (const auto& [line, number] : value.more) AddSubValue(value, line, number);
    } else {
      for (const auto& line : value.more) value.value += "\n" + line.first;
      while (!value.value.empty() && IsSpace(value.value.back())) value.value.pop_back();
    }
    value.more.clear();
  }

  void AddSubValue(IniValue& value, const std::string& line, int number) {
    if (line.empty()) return;
    size_t equals = line.find('=');
    if (equals == std::string::npos) {
      Fail(number, "expected `key = value` in an indented sub-section");
    }
    std::string key(Trim(std::string_view(line).substr(0, equals)));
    value.sub[key] = SubValue{std::string(Trim(std::string_view(line).substr(equals + 1))), number};
  }

  // configparser's [DEFAULT]: its keys appear in every other section that lacks them.
  void ApplyDefaults() {
    auto defaults = std::find_if(file_.sections.begin(), file_.sections.end(),
                                 [](const auto& section) { return section.first == "DEFAULT"; });
    if (defaults == file_.sections.end()) return;
    IniSection inherited = std::move(defaults->second);
    file_.sections.erase(defaults);
    for (auto& [name, section] : file_.sections) section.insert(inherited.begin(), inherited.end());
  }

  IniFile file_;
  IniSection* section_ = nullptr;
  std::string section_name_;
  IniValue* option_ = nullptr;
  size_t indent_ = 0;
};

IniFile ParseIni(const std::string& path, std::string_view text) {
  if (StartsWith(text, "\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 byte order mark
  IniParser parser(path);
  int number = 0;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    parser.Line(line, ++number);
  }
  return parser.Finish();
}

// ---------------------------------------------------------------------------------------------
// Section names: botocore splits "profile NAME" and "services NAME" with shlex.split, so a name
// may be quoted, and a header that is not exactly two words names nothing.

std::optional<std::vector<std::string>> ShellSplit(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quote != 0 && c == quote) {
      quote = 0;
    } else if (quote == '\'') {
      word += c;
    } else if (quote == '"') {
      // Inside double quotes a backslash escapes only '"' and itself.
      bool escape = c == '\\' && i + 1 < text.size() && (text[i + 1] == '"' || text[i + 1] == '\\');
      word += escape ? text[++i] : c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\') {
      if (i + 1 == text.size()) return std::nullopt;  // "No escaped character"
      word += text[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote != 0) return std::nullopt;  // "No closing quotation"
  if (in_word) words.push_back(std::move(word));
  return words;
}

std::optional<std::string> SectionName(const std::string& header) {
  std::optional<std::vector<std::string>> words = ShellSplit(header);
  if (!words || words->size() != 2) return std::nullopt;
  return (*words)[1];
}

// botocore's build_profile_map over the config file: [profile NAME], [default] and
// [services NAME]. A later section wins, so [default] and [profile default] go by file order.
struct ConfigMap {
  std::map<std::string, const IniSection*> profiles;
  std::map<std::string, const IniSection*> services;
};

ConfigMap BuildConfigMap(const IniFile& file) {
  ConfigMap map;
  for (const auto& [header, section] : file.sections) {
    std::optional<std::string> name;
    if (StartsWith(header, "profile")) {
      if ((name = SectionName(header))) map.profiles[*name] = &section;
    } else if (StartsWith(header, "sso-session")) {
      continue;
    } else if (StartsWith(header, "services")) {
      if ((name = SectionName(header))) map.services[*name] = &section;
    } else if (header == "default") {
      map.profiles["default"] = &section;
    }
  }
  return map;
}

const IniSection* FindSection(const IniFile& file, const std::string& name) {
  for (const auto& [header, section] : file.sections) {
    if (header == name) return &section;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// The environment and the files

class Vars {
 public:
  explicit Vars(const AwsEnvironment& env) : env_(env) {}
  // The AWS CLI's rule: a variable set but empty counts as unset.
  std::optional<std::string> Get(const std::string& name) const {
    std::optional<std::string> value = env_.getenv(name);
    if (!value || value->empty()) return std::nullopt;
    return value;
  }
  std::optional<std::string> Raw(const std::string& name) const { return env_.getenv(name); }

 private:
  const AwsEnvironment& env_;
};

// The home directory in the password database: of this user (name empty) or of `name`.
std::optional<std::string> PasswdHome(const std::string& name) {
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buffer(size > 0 ? static_cast<size_t>(size) : 16384);
  struct passwd entry {};
  struct passwd* result = nullptr;
  int rc = name.empty() ? ::getpwuid_r(::getuid(), &entry, buffer.data(), buffer.size(), &result)
                        : ::getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &result);
  if (rc != 0 || result == nullptr || result->pw_dir == nullptr) return std::nullopt;
  return std::string(result->pw_dir);
}

// os.path.expandvars, as botocore applies it to the file paths: $NAME and ${NAME} when set.
std::string ExpandVars(const Vars& vars, const std::string& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    size_t start = i + 1, end = start;
    bool braces = path[i] == '$' && start < path.size() && path[start] == '{';
    if (braces) {
      end = path.find('}', start);
      if (end == std::string::npos) end = start;
    } else if (path[i] == '$') {
      auto word = [](unsigned char c) { return std::isalnum(c) || c == '_'; };
      while (end < path.size() && word(static_cast<unsigned char>(path[end]))) ++end;
    }
    std::string name =
        braces ? path.substr(start + 1, end - start - 1) : path.substr(start, end - start);
    std::optional<std::string> value = end > start ? vars.Raw(name) : std::nullopt;
    if (!value) {
      out += path[i];
      continue;
    }
    out += *value;
    i = braces ? end : end - 1;
  }
  return out;
}

// os.path.expanduser: ~ is $HOME (else the password database), ~USER that user's home.
std::string ExpandUser(const Vars& vars, const std::string& path) {
  if (!StartsWith(path, "~")) return path;
  size_t slash = std::min(path.find('/'), path.size());
  std::string user = path.substr(1, slash - 1);
  std::optional<std::string> home = user.empty() ? vars.Get("HOME") : std::nullopt;
  if (!home) home = PasswdHome(user);
  if (!home) return path;
  while (!home->empty() && home->back() == '/') home->pop_back();
  std::string out = *home + path.substr(slash);
  return out.empty() ? "/" : out;
}

std::string FilePath(const Vars& vars, const std::string& variable, const std::string& fallback) {
  return ExpandUser(vars, ExpandVars(vars, vars.Get(variable).value_or(fallback)));
}

IniFile LoadIni(const AwsEnvironment& env, const std::string& path) {
  std::optional<std::string> text = env.read_file(path);
  if (!text) return IniFile{path, {}};  // a missing file is an empty one, as in botocore
  return ParseIni(path, *text);
}

std::optional<std::string> ReadWholeFile(const std::string& path) {
  auto fail = [&path]() {
    return AwsConfigError("cannot read " + path + ": " + std::strerror(errno));
  };
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
    throw fail();
  }
  // botocore reads only regular files (os.path.isfile); a FIFO would also block the open.
  if (!S_ISREG(info.st_mode)) return std::nullopt;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail();
  std::string text;
  char buffer[8192];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      AwsConfigError error = fail();
      ::close(fd);
      throw error;
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

// ---------------------------------------------------------------------------------------------
// The profile: [NAME] in the credentials file and [profile NAME] or [default] in the config
// file. botocore merges them key by key with the credentials file winning (Session.full_config),
// so a region or endpoint may come from either.

struct Profile {
  std::string name;
  std::string chosen_by;  // what named it, for messages
  const IniSection* credentials = nullptr;
  const IniSection* config = nullptr;
  std::string credentials_path;
  std::string config_path;
};

struct Setting {
  const IniValue* value;
  const std::string* path;
};

std::optional<Setting> Find(const Profile& profile, const std::string& key) {
  for (auto [section, path] : {std::pair{profile.credentials, &profile.credentials_path},
                               std::pair{profile.config, &profile.config_path}}) {
    if (section == nullptr) continue;
    auto it = section->find(key);
    if (it != section->end()) return Setting{&it->second, path};
  }
  return std::nullopt;
}

std::string Where(const Profile& profile, const Setting& setting) {
  return "profile " + profile.name + " (" + *setting.path + " line " +
         std::to_string(setting.value->line) + ")";
}

// A plain value, set and not empty.
std::optional<std::string> Text(const IniSection* section, const std::string& key) {
  if (section == nullptr) return std::nullopt;
  auto it = section->find(key);
  if (it == section->end() || it->second.nested || it->second.value.empty()) return std::nullopt;
  return it->second.value;
}

// A plain value of the profile, set and not empty, and where it is.
std::optional<Setting> FindText(const Profile& profile, const std::string& key) {
  for (auto [section, path] : {std::pair{profile.credentials, &profile.credentials_path},
                               std::pair{profile.config, &profile.config_path}}) {
    if (Text(section, key)) return Setting{&section->at(key), path};
  }
  return std::nullopt;
}

Profile ChooseProfile(const Vars& vars, const S3Overrides& overrides) {
  Profile profile;
  if (overrides.profile && !overrides.profile->empty()) {
    profile.name = *overrides.profile;
    profile.chosen_by = "the aprfs profile setting";
    return profile;
  }
  for (const char* variable : {"AWS_PROFILE", "AWS_DEFAULT_PROFILE"}) {
    if (auto name = vars.Get(variable)) {
      profile.name = *name;
      profile.chosen_by = variable;
      return profile;
    }
  }
  profile.name = "default";
  return profile;
}

void LocateProfile(Profile& profile, const IniFile& credentials, const IniFile& config,
                   const ConfigMap& config_map) {
  profile.credentials_path = credentials.path;
  profile.config_path = config.path;
  profile.credentials = FindSection(credentials, profile.name);
  auto it = config_map.profiles.find(profile.name);
  if (it != config_map.profiles.end()) profile.config = it->second;
  // A missing default profile is no error: it is where the CLI looks when nothing is named.
  if (profile.credentials || profile.config || profile.name == "default") return;
  throw AwsConfigError("The config profile (" + profile.name +
                       ") could not be found: " + profile.chosen_by +
                       " names it, but there is no [profile " + profile.name + "] in " +
                       config.path + " and no [" + profile.name + "] in " + credentials.path);
}

// ---------------------------------------------------------------------------------------------
// Credentials

constexpr const char* kAccessKey = "aws_access_key_id";
constexpr const char* kSecretKey = "aws_secret_access_key";

std::optional<AwsCredentials> EnvironmentCredentials(const Vars& vars) {
  std::optional<std::string> id = vars.Get("AWS_ACCESS_KEY_ID");
  std::optional<std::string> secret = vars.Get("AWS_SECRET_ACCESS_KEY");
  if (!id && !secret) return std::nullopt;
  if (!id || !secret) {
    const char* set = id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY";
    const char* missing = id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID";
    throw AwsConfigError(std::string(set) + " is set but " + missing +
                         " is not: set both, or neither");
  }
  // botocore's order: the legacy AWS_SECURITY_TOKEN first.
  std::optional<std::string> token = vars.Get("AWS_SECURITY_TOKEN");
  if (!token) token = vars.Get("AWS_SESSION_TOKEN");
  return AwsCredentials{*id, *secret, token.value_or("")};
}

// The static keys of one section (one file), as botocore's shared-credentials and config-file
// providers read them.
std::optional<AwsCredentials> SectionCredentials(const IniSection* section,
                                                 const std::string& profile,
                                                 const std::string& path) {
  std::optional<std::string> id = Text(section, kAccessKey);
  std::optional<std::string> secret = Text(section, kSecretKey);
  if (!id && !secret) return std::nullopt;
  if (!id || !secret) {
    throw AwsConfigError("profile " + profile + " in " + path + " sets " +
                         (id ? kAccessKey : kSecretKey) + " but not " +
                         (id ? kSecretKey : kAccessKey) + ": set both, or neither");
  }
  std::optional<std::string> token = Text(section, "aws_security_token");
  if (!token) token = Text(section, "aws_session_token");
  return AwsCredentials{*id, *secret, token.value_or("")};
}

// The ways to get keys that botocore implements and aprfs does not, in botocore's chain order.
void RejectUnsupportedMethods(const Profile& profile) {
  for (const char* key : {"role_arn", "web_identity_token_file", "sso_session", "sso_start_url",
                          "credential_process"}) {
    std::optional<Setting> setting = Find(profile, key);
    if (!setting || setting->value->value.empty()) continue;
    std::string command =
        "eval \"$(aws configure export-credentials --profile " + profile.name + " --format env)\"";
    throw AwsConfigError(Where(profile, *setting) + " uses " + key +
                         " and has no static keys, but aprfs supports static keys only (" +
                         kAccessKey + " and " + kSecretKey +
                         "). Export temporary keys to the environment with: " + command);
  }
}

void ResolveCredentials(const Vars& vars, const S3Overrides& overrides, const Profile& profile,
                        S3Config& out) {
  if (overrides.anonymous) {
    out.credentials_source = "none: --no-sign-request";
    return;
  }
  if ((out.credentials = EnvironmentCredentials(vars))) {
    out.credentials_source = "environment (AWS_ACCESS_KEY_ID)";
    return;
  }
  for (auto [section, path] : {std::pair{profile.credentials, &profile.credentials_path},
                               std::pair{profile.config, &profile.config_path}}) {
    if ((out.credentials = SectionCredentials(section, profile.name, *path))) {
      out.credentials_source = "profile " + profile.name + " in " + *path;
      return;
    }
  }
  RejectUnsupportedMethods(profile);
  // What EKS, ECS and container platforms set for their own credential providers.
  for (const char* variable : {"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                               "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"}) {
    if (!vars.Get(variable)) continue;
    throw AwsConfigError(std::string(variable) +
                         " is set and no static keys are, but aprfs supports static keys only "
                         "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile with them). "
                         "Export temporary keys to the environment with: eval \"$(aws configure "
                         "export-credentials --format env)\"");
  }
  out.credentials_source = "none found: unsigned requests";
}

// AWS_CA_BUNDLE, else the profile's ca_bundle: a file that must exist.
std::string ResolveCaBundle(const AwsEnvironment& env, const Vars& vars, const Profile& profile) {
  std::optional<std::string> path = vars.Get("AWS_CA_BUNDLE");
  std::string where = "AWS_CA_BUNDLE";
  if (!path) {
    std::optional<Setting> setting = FindText(profile, "ca_bundle");
    if (!setting) return "";
    path = setting->value->value;
    where = "ca_bundle in " + Where(profile, *setting);
  }
  if (!env.read_file(*path)) {
    throw AwsConfigError(where + " names " + *path + ", which is not a file");
  }
  return *path;
}

// ---------------------------------------------------------------------------------------------
// Region, endpoint, addressing

// botocore's validate_region_name: the region goes into the host name.
std::string CheckRegion(const std::string& region, const std::string& where) {
  bool ok = !region.empty() && region.size() <= 63 &&
            std::isalnum(static_cast<unsigned char>(region.front())) &&
            std::isalnum(static_cast<unsigned char>(region.back())) &&
            std::all_of(region.begin(), region.end(),
                        [](unsigned char c) { return std::isalnum(c) || c == '-'; });
  if (!ok) {
    throw AwsConfigError("region \"" + region + "\" from " + where +
                         " is not a region name (letters, digits and hyphens)");
  }
  return region;
}

std::string ResolveRegion(const Vars& vars, const S3Overrides& overrides, const Profile& profile) {
  if (overrides.region && !overrides.region->empty()) {
    return CheckRegion(*overrides.region, "the aprfs region setting");
  }
  for (const char* variable : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (auto region = vars.Get(variable)) return CheckRegion(*region, variable);
  }
  if (std::optional<Setting> region = FindText(profile, "region")) {
    return CheckRegion(region->value->value, "region in " + Where(profile, *region));
  }
  return "us-east-1";
}

// An http(s) URL with a host, scheme lowercased and without the trailing slash that would
// double in "host//key".
std::string CheckEndpoint(const std::string& url, const std::string& where) {
  std::string lower = Lower(url);
  size_t scheme = StartsWith(lower, "https://") ? 8 : StartsWith(lower, "http://") ? 7 : 0;
  auto bad = [](unsigned char c) { return std::isspace(c) || std::iscntrl(c); };
  if (scheme == 0 || std::any_of(url.begin(), url.end(), bad)) {
    throw AwsConfigError("S3 endpoint \"" + url + "\" from " + where +
                         " is not an http:// or https:// URL");
  }
  std::string out = lower.substr(0, scheme) + url.substr(scheme);
  while (out.size() > scheme && out.back() == '/') out.pop_back();
  if (out.size() == scheme || out[scheme] == '/') {
    throw AwsConfigError("S3 endpoint \"" + url + "\" from " + where + " has no host name");
  }
  return out;
}

// botocore's ensure_boolean: "true" in any case, nothing else.
bool IsTrue(const std::string& value) { return Lower(value) == "true"; }

bool IgnoreConfiguredEndpoints(const Vars& vars, const Profile& profile) {
  if (std::optional<std::string> value = vars.Get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")) {
    return IsTrue(*value);
  }
  std::optional<Setting> setting = FindText(profile, "ignore_configured_endpoint_urls");
  return setting && IsTrue(setting->value->value);
}

// The `s3 =` block of a profile, or nullptr. A one-line `s3 = ...` cannot hold settings.
const IniValue* S3Block(const IniValue* value, const std::string& where) {
  if (value == nullptr) return nullptr;
  if (!value->nested && !value->value.empty()) {
    throw AwsConfigError("s3 in " + where +
                         " must be a sub-section: `s3 =` then indented `key = value` lines");
  }
  return value->nested ? value : nullptr;
}

std::optional<SubValue> SubSetting(const IniValue* block, const std::string& key) {
  if (block == nullptr) return std::nullopt;
  auto it = block->sub.find(key);
  if (it == block->sub.end() || it->second.value.empty()) return std::nullopt;
  return it->second;
}

const IniValue* ProfileS3(const Profile& profile) {
  std::optional<Setting> s3 = Find(profile, "s3");
  return s3 ? S3Block(s3->value, Where(profile, *s3)) : nullptr;
}

// botocore's service-specific endpoint: `services = NAME` and `s3 = endpoint_url = ...` under
// [services NAME] of the config file.
std::optional<std::pair<std::string, std::string>> ServicesEndpoint(const Profile& profile,
                                                                    const ConfigMap& config) {
  std::optional<Setting> services = Find(profile, "services");
  if (!services || services->value->nested) return std::nullopt;
  const std::string& name = services->value->value;
  auto it = config.services.find(name);
  if (it == config.services.end()) {
    throw AwsConfigError("services = " + name + " in " + Where(profile, *services) + ", but " +
                         profile.config_path + " has no [services " + name + "]");
  }
  std::string where = "[services " + name + "] in " + profile.config_path;
  auto s3 = it->second->find("s3");
  if (s3 == it->second->end()) return std::nullopt;
  std::optional<SubValue> url = SubSetting(S3Block(&s3->second, where), "endpoint_url");
  if (!url) return std::nullopt;
  return std::pair{url->value, "endpoint_url in the s3 sub-section of " + where + " line " +
                                   std::to_string(url->line)};
}

// The configured endpoint and where it came from, or nullopt for the default.
std::optional<std::pair<std::string, std::string>> ConfiguredEndpoint(const Vars& vars,
                                                                      const Profile& profile,
                                                                      const ConfigMap& config) {
  for (const char* variable : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
    if (auto url = vars.Get(variable)) return std::pair{*url, std::string(variable)};
  }
  if (auto url = ServicesEndpoint(profile, config)) return url;
  if (std::optional<SubValue> url = SubSetting(ProfileS3(profile), "endpoint_url")) {
    std::optional<Setting> s3 = Find(profile, "s3");
    return std::pair{url->value, "endpoint_url in the s3 sub-section of profile " + profile.name +
                                     " (" + *s3->path + " line " + std::to_string(url->line) + ")"};
  }
  if (std::optional<Setting> url = FindText(profile, "endpoint_url")) {
    return std::pair{url->value->value, "endpoint_url in " + Where(profile, *url)};
  }
  return std::nullopt;
}

std::string DefaultEndpoint(const std::string& region) {
  // The China partition has its own DNS suffix.
  std::string suffix = StartsWith(region, "cn-") ? ".amazonaws.com.cn" : ".amazonaws.com";
  return "https://s3." + region + suffix;
}

void ResolveEndpoint(const Vars& vars, const S3Overrides& overrides, const Profile& profile,
                     const ConfigMap& config, S3Config& out) {
  std::optional<std::pair<std::string, std::string>> endpoint;
  if (overrides.endpoint && !overrides.endpoint->empty()) {
    endpoint = std::pair{*overrides.endpoint, std::string("the aprfs endpoint setting")};
  } else if (!IgnoreConfiguredEndpoints(vars, profile)) {
    endpoint = ConfiguredEndpoint(vars, profile, config);
  }
  out.custom_endpoint = endpoint.has_value();
  out.endpoint =
      endpoint ? CheckEndpoint(endpoint->first, endpoint->second) : DefaultEndpoint(out.region);
}

S3Addressing ResolveAddressing(const S3Overrides& overrides, const Profile& profile) {
  if (overrides.addressing) return *overrides.addressing;
  std::optional<SubValue> style = SubSetting(ProfileS3(profile), "addressing_style");
  if (!style) return S3Addressing::kAuto;
  if (style->value == "auto") return S3Addressing::kAuto;
  if (style->value == "path") return S3Addressing::kPath;
  if (style->value == "virtual") return S3Addressing::kVirtualHost;
  std::optional<Setting> s3 = Find(profile, "s3");
  throw AwsConfigError("addressing_style \"" + style->value +
                       "\" in the s3 sub-section of profile " + profile.name + " (" + *s3->path +
                       " line " + std::to_string(style->line) + ") is not auto, path or virtual");
}

// botocore's check_dns_name: 3 to 63 lowercase letters, digits and hyphens, a letter or digit at
// both ends. Without dots it cannot be an IPv4 address either.
bool DnsCompatible(const std::string& bucket) {
  auto label = [](unsigned char c) { return std::islower(c) || std::isdigit(c); };
  return bucket.size() >= 3 && bucket.size() <= 63 &&
         label(static_cast<unsigned char>(bucket.front())) &&
         label(static_cast<unsigned char>(bucket.back())) &&
         std::all_of(bucket.begin(), bucket.end(),
                     [&label](unsigned char c) { return label(c) || c == '-'; });
}

}  // namespace

bool S3Config::VirtualHostFor(const std::string& bucket) const {
  switch (addressing) {
    case S3Addressing::kVirtualHost:
      return true;
    case S3Addressing::kPath:
      return false;
    case S3Addressing::kAuto:
      break;
  }
  return !custom_endpoint && DnsCompatible(bucket);
}

AwsEnvironment AwsEnvironment::Process() {
  AwsEnvironment env;
  env.getenv = [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
  env.read_file = ReadWholeFile;
  return env;
}

S3Config ResolveS3Config(const AwsEnvironment& env, const S3Overrides& overrides) {
  Vars vars(env);
  IniFile credentials =
      LoadIni(env, FilePath(vars, "AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"));
  IniFile config = LoadIni(env, FilePath(vars, "AWS_CONFIG_FILE", "~/.aws/config"));
  ConfigMap config_map = BuildConfigMap(config);

  Profile profile = ChooseProfile(vars, overrides);
  LocateProfile(profile, credentials, config, config_map);

  S3Config out;
  out.profile = profile.name;
  ResolveCredentials(vars, overrides, profile, out);
  out.region = ResolveRegion(vars, overrides, profile);
  ResolveEndpoint(vars, overrides, profile, config_map, out);
  out.addressing = ResolveAddressing(overrides, profile);
  out.ca_bundle = ResolveCaBundle(env, vars, profile);
  return out;
}

}  // namespace aprfs
