// The gpubind::Error a call throws; fails the test when it throws nothing.
#pragma once

#include <gtest/gtest.h>

#include "gpubind/util/error.hpp"

namespace gpubind::test {

template <typename F>
util::Error error_of(F&& f) {
    try {
        f();
    } catch (const util::Error& e) {
        return e;
    }
    ADD_FAILURE() << "no error thrown";
    return util::Error(0, "none");
}

}  // namespace gpubind::test
