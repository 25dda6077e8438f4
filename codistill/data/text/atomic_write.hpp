#pragma once
// Writing a file so that readers see either nothing or the complete file, never a torn one
// (the same protocol as checkpoint publishing, DESIGN.md section 5): the bytes go to
// `.<name>.tmp.<pid>` in the destination folder, which is fsynced, closed and renamed over
// the destination; then the folder is fsynced so the rename survives a crash. A preparation
// killed part-way leaves at most a temp file, which no reader opens.
#include <cstddef>
#include <functional>
#include <string>

namespace codistill::data::text {

// Receives the bytes of the file in pieces; throws std::runtime_error naming the temp file
// on a write error (e.g. a full disk).
using ByteSink = std::function<void(const void* data, std::size_t n)>;

// Calls produce(sink) to generate the content, then publishes it at `path` (replacing a
// file already there). On any exception the temp file is removed and the exception passes
// on; `path` is then untouched.
void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& produce);

}  // namespace codistill::data::text
