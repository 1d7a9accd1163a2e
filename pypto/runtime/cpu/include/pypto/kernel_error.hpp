// pypto: the error a kernel raises on the CPU when it does what the device would get wrong
// (a wait with no matching set, a tile beyond its memory, a GM box outside its tensor...).
// The launcher catches it per core and hands the message back to Python.
#pragma once

#include <stdexcept>
#include <string>

namespace pypto {

struct KernelError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const std::string& message) { throw KernelError(message); }

}  // namespace pypto
