// token_files.cpp: token data from HDF5 files (data.type = "hdf5"): the
// files of a split (data.path, data.eval_path; glob patterns expanded) read
// as one token sequence, windows of it as samples, and the full check of the
// files before step 0. The format is in docs/data.md.
#include <glob.h>
#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/h5_id.hpp"
#include "pipetrain/base/hdf5_lock.hpp"
#include "pipetrain/base/input_file.hpp"
#include "pipetrain/base/quiet_hdf5.hpp"
#include "pipetrain/base/rng.hpp"
#include "pipetrain/base/sha256.hpp"
#include "pipetrain/io/data_files.hpp"

namespace pt {

namespace {

constexpr uint64_t kShuffleStream = 14;  // window permutation (as before shards)
constexpr size_t kOpenFiles = 16;        // files a sequence keeps open at once
constexpr int64_t kFormatVersion = 2;    // the newest token-file format read (docs/data.md)

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// An integer type of a token dataset: "uint16", "int32", ...
struct IntType {
  size_t bytes = 0;
  bool is_unsigned = false;
  bool operator==(const IntType& o) const { return bytes == o.bytes && is_unsigned == o.is_unsigned; }
  bool operator!=(const IntType& o) const { return !(*this == o); }
  std::string name() const { return (is_unsigned ? "uint" : "int") + std::to_string(8 * bytes); }
};

// The scalar string attribute `name` of `obj` (variable or fixed length);
// nullopt when there is none or it is not a string.
std::optional<std::string> string_attribute(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return std::nullopt;
  H5Id attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) return std::nullopt;
  H5Id type(H5Aget_type(attr.get()), H5Tclose);
  if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING) return std::nullopt;
  H5Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
  if (!mem.valid()) return std::nullopt;
  if (H5Tis_variable_str(type.get()) > 0) {
    if (H5Tset_size(mem.get(), H5T_VARIABLE) < 0 ||
        H5Tset_cset(mem.get(), H5Tget_cset(type.get())) < 0)
      return std::nullopt;
    char* text = nullptr;
    if (H5Aread(attr.get(), mem.get(), &text) < 0 || !text) return std::nullopt;
    std::string out(text);
    H5free_memory(text);
    return out;
  }
  const size_t size = H5Tget_size(type.get());
  if (size == 0 || H5Tset_size(mem.get(), size) < 0) return std::nullopt;
  std::string text(size, '\0');
  if (H5Aread(attr.get(), mem.get(), text.data()) < 0) return std::nullopt;
  return text.substr(0, text.find('\0'));
}

// The integer attribute `name` of `obj`; nullopt when there is none.
std::optional<int64_t> int_attribute(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return std::nullopt;
  H5Id attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) return std::nullopt;
  H5Id type(H5Aget_type(attr.get()), H5Tclose);
  int64_t value = 0;
  if (!type.valid() || H5Tget_class(type.get()) != H5T_INTEGER ||
      H5Aread(attr.get(), H5T_NATIVE_INT64, &value) < 0)
    return std::nullopt;
  return value;
}

// What a token file records about its tokenizer (attributes of its dataset
// and the file's tokenizer_json dataset).
struct TokenizerTag {
  std::optional<std::string> kind;    // attribute tokenizer: "bytes", "bpe", ...
  std::optional<std::string> sha256;  // attribute tokenizer_sha256
  std::optional<int64_t> vocab_size;  // attribute vocab_size
  std::optional<std::string> stored_sha256;  // SHA-256 of the stored tokenizer_json bytes

  // Equal keys = the same tokenizer. "" when none is recorded.
  std::string key() const {
    if (!kind) return "";
    if (*kind == "bytes") return "bytes";
    return sha256 ? "sha256:" + *sha256 : "tokenizer:" + *kind;
  }
};

// How a message names a tokenizer of key `key`.
std::string describe_tokenizer(const std::string& key) {
  if (key.empty()) return "no tokenizer recorded (no tokenizer attribute)";
  if (key == "bytes") return "the byte tokenizer (tokenizer = \"bytes\")";
  if (key.rfind("sha256:", 0) == 0) return "the tokenizer of SHA-256 " + key.substr(7, 16) + "...";
  return "tokenizer = \"" + key.substr(10) + "\" (without a tokenizer_sha256 attribute)";
}

// A 1-D integer dataset read in slices. `at` names the file in messages
// (`data.path = "a.h5"`), without the ": " that follows.
class TokenFile {
 public:
  TokenFile(const std::string& path, const std::string& dataset, const std::string& at)
      : path_(path), at_(at) {
    Hdf5Lock lock;  // token reads go on while an asynchronous checkpoint writes (hdf5_lock.hpp)
    QuietHdf5 quiet;
    const std::string prefix = at + ": ";
    require_regular_file(path, "an HDF5 token file", at);
    file_ = H5Id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!file_.valid()) throw InputError(prefix + "cannot open as an HDF5 file (missing or not HDF5)");
    dset_ = H5Id(H5Dopen2(file_.get(), dataset.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dset_.valid()) {
      close_locked();
      throw InputError(prefix + "has no dataset '" + dataset + "' (see data.dataset)");
    }
    int rank = -1;
    bool integer = false;
    hsize_t dims[1] = {0};
    {
      H5Id space(H5Dget_space(dset_.get()), H5Sclose), type(H5Dget_type(dset_.get()), H5Tclose);
      rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
      integer = type.valid() && H5Tget_class(type.get()) == H5T_INTEGER;
      type_.is_unsigned = integer && H5Tget_sign(type.get()) == H5T_SGN_NONE;
      type_.bytes = integer ? H5Tget_size(type.get()) : 0;
      if (rank == 1 && H5Sget_simple_extent_dims(space.get(), dims, nullptr) < 0) rank = -1;
    }
    if (rank != 1 || !integer) {
      close_locked();
      throw InputError(prefix + "dataset '" + dataset + "' must be a 1-D integer array of token ids");
    }
    length_ = static_cast<int64_t>(dims[0]);
  }
  ~TokenFile() {
    Hdf5Lock lock;
    close_locked();
  }
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t length() const { return length_; }
  const std::string& path() const { return path_; }
  IntType type() const { return type_; }
  bool is_unsigned() const { return type_.is_unsigned; }  // uint64 ids may exceed INT64_MAX

  // The file's format_version when it says it is a token file of a newer
  // format than this reader knows; 0 otherwise.
  int64_t newer_format() const {
    Hdf5Lock lock;
    QuietHdf5 quiet;
    const std::optional<std::string> format = string_attribute(file_.get(), "format");
    const std::optional<int64_t> version = int_attribute(file_.get(), "format_version");
    return format && *format == "pipetrain-tokens" && version && *version > kFormatVersion ? *version : 0;
  }

  TokenizerTag tokenizer() const {
    Hdf5Lock lock;
    QuietHdf5 quiet;
    TokenizerTag tag;
    tag.kind = string_attribute(dset_.get(), "tokenizer");
    tag.sha256 = string_attribute(dset_.get(), "tokenizer_sha256");
    tag.vocab_size = int_attribute(dset_.get(), "vocab_size");
    if (const std::optional<std::string> bytes = tokenizer_json()) tag.stored_sha256 = sha256_hex(*bytes);
    return tag;
  }

  // The bytes of the file's tokenizer_json dataset; none when it has none
  // (or it cannot be read).
  std::optional<std::string> tokenizer_json() const {
    Hdf5Lock lock;
    QuietHdf5 quiet;
    if (H5Lexists(file_.get(), "tokenizer_json", H5P_DEFAULT) <= 0) return std::nullopt;
    H5Id json(H5Dopen2(file_.get(), "tokenizer_json", H5P_DEFAULT), H5Dclose);
    if (!json.valid()) return std::nullopt;
    H5Id space(H5Dget_space(json.get()), H5Sclose);
    const hssize_t n = space.valid() ? H5Sget_simple_extent_npoints(space.get()) : -1;
    if (n < 0) return std::nullopt;
    std::string bytes(static_cast<size_t>(n), '\0');
    if (n > 0 && H5Dread(json.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0)
      return std::nullopt;
    return bytes;
  }

  void read(int64_t start, int64_t count, int32_t* out) const { read_as(start, count, H5T_NATIVE_INT32, out); }
  void read(int64_t start, int64_t count, int64_t* out) const { read_as(start, count, H5T_NATIVE_INT64, out); }
  void read(int64_t start, int64_t count, uint64_t* out) const { read_as(start, count, H5T_NATIVE_UINT64, out); }

 private:
  // A damaged file (a chunk that does not decompress, a truncated one) is the
  // user's input: one InputError naming the key and the file, no HDF5 trace.
  void read_as(int64_t start, int64_t count, hid_t mem_type, void* out) const {
    Hdf5Lock lock;
    QuietHdf5 quiet;
    hsize_t offset[1] = {static_cast<hsize_t>(start)}, size[1] = {static_cast<hsize_t>(count)};
    H5Id file_space(H5Dget_space(dset_.get()), H5Sclose);
    H5_CHECK(file_space.get());
    H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, offset, nullptr, size, nullptr));
    H5Id mem_space(H5Screate_simple(1, size, nullptr), H5Sclose);
    H5_CHECK(mem_space.get());
    const herr_t rc = H5Dread(dset_.get(), mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, out);
    if (rc < 0)
      throw InputError(at_ + ": cannot read tokens " + std::to_string(start) + ".." +
                       std::to_string(start + count - 1) + " of its dataset (a damaged file?)");
  }

  // Closes the dataset, then the file; the caller holds the Hdf5Lock.
  void close_locked() {
    dset_.reset();
    file_.reset();
  }
  std::string path_;
  std::string at_;  // `data.path = "a.h5"` (with the deck's file and line), for messages
  H5Id file_, dset_;
  int64_t length_ = 0;
  IntType type_;
};

// The files of a split as one sequence: token i of the sequence is token
// i - begin_[f] of file f, where begin_[f] <= i < begin_[f + 1]. Files are
// opened on demand, at most kOpenFiles at once (least recently used closed).
class TokenSequence {
 public:
  TokenSequence(std::vector<TokenFileRef> files, std::string dataset)
      : files_(std::move(files)), dataset_(std::move(dataset)) {
    begin_.push_back(0);
    for (size_t f = 0; f < files_.size(); ++f) begin_.push_back(begin_.back() + open(f).length());
  }

  int64_t length() const { return begin_.back(); }
  size_t file_count() const { return files_.size(); }

  void read(int64_t start, int64_t count, int32_t* out) const {
    while (count > 0) {
      // The last file beginning at or before `start` (skips empty files).
      const size_t f = static_cast<size_t>(std::upper_bound(begin_.begin(), begin_.end(), start) - begin_.begin()) - 1;
      const int64_t n = std::min(count, begin_[f + 1] - start);
      open(f).read(start - begin_[f], n, out);
      start += n;
      out += n;
      count -= n;
    }
  }

 private:
  const TokenFile& open(size_t f) const {
    for (size_t i = 0; i < open_.size(); ++i) {
      if (open_[i].first != f) continue;
      std::rotate(open_.begin() + i, open_.begin() + i + 1, open_.end());  // most recent last
      return *open_.back().second;
    }
    if (open_.size() == kOpenFiles) open_.erase(open_.begin());
    open_.emplace_back(f, std::make_unique<TokenFile>(files_[f].path, dataset_, files_[f].at));
    return *open_.back().second;
  }

  std::vector<TokenFileRef> files_;
  std::string dataset_;
  std::vector<int64_t> begin_;  // (files + 1) first token of each file; the total last
  mutable std::vector<std::pair<size_t, std::unique_ptr<TokenFile>>> open_;
};

// "deck.toml:7: data.path = \"a.h5\"" for one string, "... (3 files)" otherwise.
std::string split_label(const DataSetConfig& config, Split split, size_t files) {
  const bool train = split == Split::Train;
  const std::string& where = train ? config.path_at : config.eval_path_at;
  const std::string& one = train ? config.data.path : config.data.eval_path;
  const std::vector<std::string>& list = train ? config.data.path_list : config.data.eval_path_list;
  std::string label = list.empty() ? where + " = " + quoted(one) : where;
  if (files != 1 || !list.empty()) label += " (" + std::to_string(files) + (files == 1 ? " file)" : " files)");
  return label;
}

// Window w holds tokens w*T .. w*T + T of the sequence (T + 1 tokens;
// consecutive windows share one token). Sample i uses window i mod W, or,
// with shuffle on, entry i mod W of a seeded permutation drawn anew for
// every epoch i / W.
class Hdf5Data final : public Dataset {
 public:
  Hdf5Data(const DataSetConfig& config, Split split)
      : sequence_(token_files(config, split), config.data.dataset),
        seq_len_(config.gpt.seq_len), seed_(config.data.seed),
        shuffle_(config.data.shuffle && split == Split::Train) {
    windows_ = (sequence_.length() - 1) / seq_len_;
    if (windows_ < 1)
      throw InputError(split_label(config, split, sequence_.file_count()) +
                       ": too short for one window of model.seq_len + 1 tokens");
  }

  Tensor inputs(int64_t first, int64_t count) const override { return read(first, count, 0); }
  Tensor targets(int64_t first, int64_t count) const override { return read(first, count, 1); }

 private:
  int64_t window_of(int64_t sample) const {
    const int64_t epoch = sample / windows_, pos = sample % windows_;
    if (!shuffle_) return pos;
    if (epoch != cached_epoch_) build_permutation(epoch);
    return permutation_[pos];
  }

  // Fisher-Yates with the counter-based generator keyed by (seed, epoch).
  void build_permutation(int64_t epoch) const {
    permutation_.resize(windows_);
    std::iota(permutation_.begin(), permutation_.end(), int64_t{0});
    for (int64_t i = windows_ - 1; i > 0; --i) {
      uint64_t bits = random_bits(seed_ ^ mix64(static_cast<uint64_t>(epoch)), kShuffleStream, i);
      std::swap(permutation_[i], permutation_[bits % static_cast<uint64_t>(i + 1)]);
    }
    cached_epoch_ = epoch;
  }

  Tensor read(int64_t first, int64_t count, int64_t offset) const {
    Tensor out = Tensor::empty({count, seq_len_}, DType::I32, MemCategory::Workspace, Device::CPU);
    for (int64_t r = 0; r < count; ++r)
      sequence_.read(window_of(first + r) * seq_len_ + offset, seq_len_, out.i32() + r * seq_len_);
    return out;
  }

  TokenSequence sequence_;
  int64_t seq_len_;
  uint64_t seed_;
  bool shuffle_;
  int64_t windows_ = 0;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> permutation_;  // (windows) for cached_epoch_
};

// ---- the check before step 0 -----------------------------------------------

template <typename T>
bool outside_vocabulary(T id, int64_t vocab) {
  if constexpr (std::is_signed_v<T>) {
    if (id < 0) return true;
  }
  return id >= static_cast<T>(vocab);
}

// Every id of `file` in 0..vocab-1, read in chunks as T (uint64 for unsigned
// files, so ids above INT64_MAX are reported as stored, not clipped).
template <typename T>
void check_token_ids(const TokenFile& file, int64_t vocab, const std::string& prefix, const std::string& hint) {
  constexpr int64_t kChunk = 1 << 20;
  std::vector<T> buffer(kChunk);
  for (int64_t start = 0; start < file.length(); start += kChunk) {
    const int64_t n = std::min(kChunk, file.length() - start);
    file.read(start, n, buffer.data());
    for (int64_t i = 0; i < n; ++i)
      if (outside_vocabulary(buffer[i], vocab))
        throw InputError(prefix + "token " + std::to_string(start + i) + " is " + std::to_string(buffer[i]) +
                         ", outside 0..model.vocab_size-1 = 0.." + std::to_string(vocab - 1) + hint);
  }
}

// The tokenizer every file must carry, and where that requirement comes from.
struct TokenizerReference {
  std::string key;  // TokenizerTag::key()
  std::string at;   // "deck.toml:9: data.tokenizer = \"tok.json\"" or the first file's `at`
  bool from_deck = false;
};

// data.tokenizer as a reference: "bytes", or the SHA-256 of a tokenizer.json.
std::optional<TokenizerReference> deck_tokenizer(const DataSetConfig& config) {
  const std::string& value = config.data.tokenizer;
  if (value.empty()) return std::nullopt;
  const std::string at = config.tokenizer_at + " = " + quoted(value);
  if (value == "bytes") return TokenizerReference{"bytes", at, true};
  require_regular_file(value, "a tokenizer.json file, or \"bytes\" for byte tokens", at);
  std::ifstream in(value, std::ios::binary);
  if (!in) throw InputError(at + ": cannot open it: " + std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return TokenizerReference{"sha256:" + sha256_hex(bytes), at, true};
}

void check_file(const DataSetConfig& config, const TokenFileRef& ref, const TokenFile& file,
                std::optional<TokenizerReference>& reference) {
  const std::string prefix = ref.at + ": ";
  const int64_t vocab = config.gpt.vocab_size;
  if (const int64_t version = file.newer_format())
    throw InputError(prefix + "is a token file of format_version " + std::to_string(version) +
                     ", newer than this pipetrain reads (up to " + std::to_string(kFormatVersion) +
                     "); update pipetrain or remake the file");
  const TokenizerTag tag = file.tokenizer();
  if (tag.sha256 && tag.stored_sha256 && *tag.sha256 != *tag.stored_sha256)
    throw InputError(prefix + "its stored tokenizer_json has SHA-256 " + tag.stored_sha256->substr(0, 16) +
                     "..., not that of its tokenizer_sha256 attribute (" + tag.sha256->substr(0, 16) +
                     "...): the file is damaged or was edited");
  if (!reference) {
    reference = TokenizerReference{tag.key(), ref.at, false};
  } else if (tag.key() != reference->key) {
    if (reference->from_deck)
      throw InputError(prefix + "was tokenized with " + describe_tokenizer(tag.key()) + ", but " + reference->at +
                       " is " + describe_tokenizer(reference->key) +
                       ": tokenize the corpus with that tokenizer, or set data.tokenizer to the one the files carry");
    throw InputError(prefix + "was tokenized with " + describe_tokenizer(tag.key()) + ", but " + reference->at +
                     " with " + describe_tokenizer(reference->key) +
                     ": all token files of a run must come from one tokenizer");
  }
  std::string hint;
  if (tag.vocab_size && *tag.vocab_size > vocab)
    hint = "; the file's tokenizer has " + std::to_string(*tag.vocab_size) +
           " tokens (its vocab_size attribute): set model.vocab_size to at least that";
  if (file.is_unsigned())
    check_token_ids<uint64_t>(file, vocab, prefix, hint);
  else
    check_token_ids<int64_t>(file, vocab, prefix, hint);
  if (tag.vocab_size && *tag.vocab_size > vocab)
    throw InputError(prefix + "its tokenizer has " + std::to_string(*tag.vocab_size) +
                     " tokens (its vocab_size attribute), more than model.vocab_size = " + std::to_string(vocab) +
                     ": set model.vocab_size to at least " + std::to_string(*tag.vocab_size));
}

// The files of one split: each alone, one integer type, then enough windows.
void check_split(const DataSetConfig& config, const std::vector<TokenFileRef>& files, const std::string& label,
                 std::optional<TokenizerReference>& reference) {
  std::optional<std::pair<IntType, std::string>> first_type;
  int64_t length = 0;
  for (const TokenFileRef& ref : files) {
    TokenFile file(ref.path, config.data.dataset, ref.at);
    if (!first_type) {
      first_type = std::make_pair(file.type(), ref.at);
    } else if (file.type() != first_type->first) {
      throw InputError(ref.at + ": holds " + file.type().name() + " token ids, but " + first_type->second +
                       " holds " + first_type->first.name() +
                       ": the files of one split must share one integer type (one tokenizer run writes them)");
    }
    check_file(config, ref, file, reference);
    length += file.length();
  }
  const int64_t t = config.gpt.seq_len, batch = config.batch_size;
  const int64_t windows = length > 0 ? (length - 1) / t : 0;
  if (windows < batch)
    throw InputError(label + ": too short: " + std::to_string(length) + " tokens" +
                     (files.size() > 1 ? " in " + std::to_string(files.size()) + " files" : std::string()) +
                     " make " + std::to_string(windows) + " windows of model.seq_len + 1 = " +
                     std::to_string(t + 1) + " tokens, but one batch needs training.batch_size = " +
                     std::to_string(batch));
}

}  // namespace

std::vector<TokenFileRef> token_files(const DataSetConfig& config, Split split) {
  const bool train = split == Split::Train;
  const std::string& where = train ? config.path_at : config.eval_path_at;
  const std::string& one = train ? config.data.path : config.data.eval_path;
  const std::vector<std::string>& list = train ? config.data.path_list : config.data.eval_path_list;
  if (list.empty() && one.empty())
    throw InputError(where + ": names no token file (an empty string or list); give a file, a glob pattern or "
                     "a list of them");
  const std::vector<std::string> entries = list.empty() ? std::vector<std::string>{one} : list;
  std::vector<TokenFileRef> files;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& entry = entries[i];
    const std::string at = where + (list.empty() ? "" : " entry " + std::to_string(i)) + " = " + quoted(entry);
    std::error_code ec;
    if (std::filesystem::exists(entry, ec) || !has_glob_chars(entry)) {
      files.push_back({entry, at});
      continue;
    }
    glob_t found{};
    const int rc = glob(entry.c_str(), GLOB_NOSORT, nullptr, &found);
    std::vector<std::string> matches;
    if (rc == 0)
      for (size_t k = 0; k < found.gl_pathc; ++k) matches.emplace_back(found.gl_pathv[k]);
    globfree(&found);
    if (rc == GLOB_NOSPACE) throw Error(at + ": out of memory expanding the pattern");
    if (matches.empty()) throw InputError(at + ": matches no file");
    std::sort(matches.begin(), matches.end());  // byte order of the paths
    for (const std::string& m : matches) files.push_back({m, at + " (match " + quoted(m) + ")"});
  }
  return files;
}

std::unique_ptr<Dataset> make_hdf5_dataset(const DataSetConfig& config, Split split) {
  return std::make_unique<Hdf5Data>(config, split);
}

void check_token_data(const DataSetConfig& config) {
  std::optional<TokenizerReference> reference = deck_tokenizer(config);
  const std::vector<TokenFileRef> train = token_files(config, Split::Train);
  check_split(config, train, split_label(config, Split::Train, train.size()), reference);
  if (config.data.eval_path.empty() && config.data.eval_path_list.empty()) return;
  const std::vector<TokenFileRef> eval = token_files(config, Split::Eval);
  check_split(config, eval, split_label(config, Split::Eval, eval.size()), reference);
}

StoredTokenizer stored_tokenizer(const DataSetConfig& config) {
  const std::vector<TokenFileRef> files = token_files(config, Split::Train);
  const TokenFile file(files.front().path, config.data.dataset, files.front().at);
  const TokenizerTag tag = file.tokenizer();
  StoredTokenizer out;
  out.kind = tag.kind.value_or("");
  out.json = file.tokenizer_json().value_or("");
  out.at = files.front().at;
  return out;
}

void check_token_file(const DataSetConfig& config, const std::string& path, const std::string& deck_key) {
  std::optional<TokenizerReference> reference = deck_tokenizer(config);
  const std::string at = deck_key + " = " + quoted(path);
  check_split(config, {TokenFileRef{path, at}}, at, reference);
}

}  // namespace pt
