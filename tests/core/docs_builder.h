// A batch of documents built string by string, viewed as the core's lm_docs (int64 offsets +
// one payload).  Shared by the batch-runner tests (tests/core/test_batch*.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

extern "C" {
#include "luminamoon/batch.h"
}

namespace lmtest {

struct Docs {
  std::vector<int64_t> off{0};
  std::string data;
  void add(const std::string &s) {
    data += s;
    off.push_back(static_cast<int64_t>(data.size()));
  }
  // Borrowed view: valid while this object lives and is not changed.
  lm_docs view() const {
    return {off.data(), reinterpret_cast<const uint8_t *>(data.data()), off.size() - 1, data.size()};
  }
};

}  // namespace lmtest
