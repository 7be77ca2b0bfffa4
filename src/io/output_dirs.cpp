// output_dirs.cpp: the output directories before a run writes into them:
// made if missing, checked to take new files, no directory where a file
// goes, and the files of an earlier run in the same directory moved aside
// before a fresh run would overwrite them (docs/outputs.md).
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/input_file.hpp"
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/io/metrics.hpp"

namespace pt {

namespace {

// mkdir -p; `head` ("file:line: key = value: ") starts every message.
void make_directories(const std::string& path, const std::string& head) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') continue;
    partial = path.substr(0, i);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      throw InputError(head + "cannot create directory '" + partial + "': " + std::strerror(errno));
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) throw InputError(head + "not a directory");
}

// A file is created in `dir` and removed again: the directory takes new files.
void check_writable(const std::string& dir, const std::string& head) {
  const std::string probe = dir + "/.pipetrain_write_probe." + std::to_string(getpid());
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    throw InputError(head + "cannot create files in '" + dir + "': " + std::strerror(errno));
  close(fd);
  if (unlink(probe.c_str()) != 0)
    throw InputError(head + "cannot remove files from '" + dir + "': " + std::strerror(errno));
}

// Where the run will write the file `path`, nothing but a file may stand
// (nothing at all is fine: the run makes it).
void check_not_directory(const std::string& path, const std::string& head, const std::string& what) {
  const FileKind kind = file_kind(path);
  if (kind == FileKind::Missing || kind == FileKind::Regular || kind == FileKind::Unknown) return;
  const std::string at = head.size() >= 2 ? head.substr(0, head.size() - 2) : head;  // without its ": "
  throw InputError(
      not_a_regular_file_message(path, kind, what + ", which the run writes there (remove or rename it)", at));
}

// The files a run writes into output.dir (besides its checkpoints).
constexpr const char* kRunFiles[] = {"metrics.h5", "deck.resolved.toml", "trace.h5", "profile.h5"};

std::string key_head(const Deck& deck, const std::string& key, const std::string& value) {
  return deck.where(key) + " = \"" + value + "\": ";
}

}  // namespace

void prepare_output_directories(const Deck& deck) {
  const std::string& dir = deck.output.dir;
  const std::string head = key_head(deck, "output.dir", dir);
  make_directories(dir, head);
  check_writable(dir, head);
  for (const char* name : kRunFiles)
    check_not_directory(dir + "/" + name, head, std::string("its ") + name);
  if (deck.output.checkpoint_every <= 0) return;
  const std::string root = checkpoint_root(deck);
  const std::string root_head = deck.output.checkpoint_dir.empty()
                                    ? head + "checkpoint directory '" + root + "': "
                                    : key_head(deck, "output.checkpoint_dir", root);
  make_directories(root, root_head);
  check_writable(root, root_head);
  check_not_directory(root + "/latest", root_head, "the checkpoint pointer file `latest`");
}

std::string prepare_profile_output(const Deck& deck, const std::string& out) {
  if (out.empty()) {
    const std::string& dir = deck.output.dir;
    const std::string head = key_head(deck, "output.dir", dir);
    make_directories(dir, head);
    check_writable(dir, head);
    check_not_directory(dir + "/profile.h5", head, "the profile");
    return dir + "/profile.h5";
  }
  const std::string head = "--out " + out + ": ";
  if (file_kind(out) == FileKind::Directory) {
    const std::string inside = out.back() == '/' ? out + "profile.h5" : out + "/profile.h5";
    throw InputError(head + "a directory; --out names the file the profile is written to, e.g. --out " + inside);
  }
  const size_t slash = out.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : out.substr(0, slash));
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) throw InputError(head + "directory '" + dir + "' does not exist");
  if (!S_ISDIR(st.st_mode)) throw InputError(head + "'" + dir + "' is not a directory");
  check_writable(dir, head);
  check_not_directory(out, head, "the profile");
  return out;
}

namespace {

// "20261207T213000Z": the UTC time, for the name of a set-aside directory.
std::string utc_stamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm {};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%SZ", &tm);
  return text;
}

// `path` moved to `to`; an InputError naming both (and `head`) when it cannot be.
void move_or_refuse(const std::string& path, const std::string& to, const std::string& head) {
  std::error_code ec;
  std::filesystem::rename(path, to, ec);
  if (ec)
    throw InputError(head + "cannot move the earlier run's '" + path + "' aside to '" + to + "': " +
                     ec.message() + "; move it yourself, or resume the earlier run with --resume");
}

}  // namespace

std::string set_aside_earlier_run(const Deck& deck) {
  const std::string root = checkpoint_root(deck);
  if (!any_checkpoint_in(root)) return "";
  namespace fs = std::filesystem;
  const std::string& dir = deck.output.dir;
  const std::string head = key_head(deck, "output.dir", dir);
  const std::string stamp = utc_stamp();  // one time for every name it moves
  std::string aside = dir + "/previous_" + stamp;
  for (int k = 2; fs::exists(aside); ++k) aside = dir + "/previous_" + stamp + "_" + std::to_string(k);
  make_directories(aside, head);
  std::string moved;
  for (const char* name : kRunFiles) {
    const std::string path = dir + "/" + name;
    if (!fs::exists(path)) continue;
    move_or_refuse(path, aside + "/" + name, head);
    moved += std::string(moved.empty() ? "" : ", ") + name;
  }
  // The checkpoints: into the same directory when they are output.dir's own,
  // beside themselves when output.checkpoint_dir puts them elsewhere.
  const bool own = deck.output.checkpoint_dir.empty();
  const std::string checkpoints_to = own ? aside + "/checkpoints" : root + ".previous_" + stamp;
  move_or_refuse(root, checkpoints_to, head);
  return "output.dir " + dir + " held checkpoints of an earlier run (" + root + "), and this run starts "
         "at step 0 without --resume: they were moved to " + checkpoints_to +
         (moved.empty() ? "" : ", and " + moved + " to " + aside) +
         ", so that nothing of that run is overwritten; resume a run with --resume";
}

}  // namespace pt
