// The gpubind::Error a call throws; fails the test when it throws nothing.
#pragma once

#include <gtest/gtest.h>

#include "gpubind/util/error.hpp"

namespace gpubind::test {

template <typename F>
Error error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e;
    }
    ADD_FAILURE() << "no error thrown";
    return Error(0, "none");
}

}  // namespace gpubind::test
