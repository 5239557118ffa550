// record_format.h: the parts of the MRCACHE_RECORD stream that its writer
// (interpose/recorder.h) and its reader (bench/trace.h) share.
#ifndef INTERPOSE_RECORD_FORMAT_H_
#define INTERPOSE_RECORD_FORMAT_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "mrcache/config.h"

namespace mrcache_preload {

// The first line of the stream (version 1), without the newline.
constexpr char kRecordHeader[] = "# mrcache-record 1";
// What the first line starts with, whatever the version.
constexpr char kRecordHeaderPrefix[] = "# mrcache-record ";

// "config KEY=VALUE ..." for every key of `config`, in Config::Keys() order,
// in the form Config::Set reads back (no newline).
inline std::string RecordConfigLine(const mrcache::Config& config) {
  std::string line = "config";
  for (const std::string& key : mrcache::Config::Keys()) {
    absl::StatusOr<std::string> value = config.Get(key);
    if (value.ok()) absl::StrAppend(&line, " ", key, "=", *value);
  }
  return line;
}

}  // namespace mrcache_preload

#endif  // INTERPOSE_RECORD_FORMAT_H_
