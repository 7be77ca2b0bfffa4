// error_of.hpp: the message of the error a call throws, for the tests that
// check messages: error_of(f) is the what() of the InputError (or, with
// error_of<E>, the E) that f throws, and "" when it throws none.
#pragma once

#include <string>
#include <utility>

#include "pipetrain/base/error.hpp"

namespace pt::test {

template <class E = InputError, class F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace pt::test
