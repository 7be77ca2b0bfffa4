// input_file.hpp: the one check that a path the user named is a regular file, with one message for every site.
#pragma once

#include <string>

namespace pt {

// What stands at a path, links followed (stat). Unknown: stat failed for
// another reason than a missing file (e.g. permission), left to the open.
enum class FileKind { Regular, Missing, Directory, Fifo, CharDevice, BlockDevice, Socket, Other, Unknown };
FileKind file_kind(const std::string& path);

// Throws InputError unless `path` is a regular file (or a link to one):
//   "<at>: '<path>': a directory, not a regular file; expected <expected>"
//   "<at>: '<path>': no such file; expected <expected>"
// (a FIFO, a character device, a block device, a socket likewise). `at` is
// the deck key or other place that named the path ("deck.toml:7: data.path =
// \"a.h5\"", "--tokenizer \"t.json\""); "" starts the message with the path.
// A FIFO or a device is refused before anything opens it (an open would block
// for ever or never end). Unknown passes: the caller's open reports it.
void require_regular_file(const std::string& path, const std::string& expected, const std::string& at = "");

// The message require_regular_file throws for `kind` (not Regular or Unknown).
std::string not_a_regular_file_message(const std::string& path, FileKind kind, const std::string& expected,
                                       const std::string& at = "");

}  // namespace pt
