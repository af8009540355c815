// What a pretraining run (pretraining.h, policy_pretraining.h) keeps of its progress: the
// iterations it has finished and the fingerprint of the options it runs with, so that a resumed
// run refuses options other than its own.
#pragma once

#include <filesystem>
#include <string>

namespace placer::setup {

// The iterations finished per `file`, or 0 where it does not exist. Throws std::runtime_error
// naming the file when it was written under another fingerprint.
int ReadIterationsDone(const std::filesystem::path& file, const std::string& fingerprint);

void WriteIterationsDone(const std::filesystem::path& file, int done,
                         const std::string& fingerprint);

}  // namespace placer::setup
