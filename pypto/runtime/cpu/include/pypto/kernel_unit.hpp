// The headers of every kernel build unit (pypto/runtime/cpu/units.py), in one file so that g++
// parses them once per compiler and flags into a precompiled header (kernel_unit.hpp.gch in the
// kernel cache) that each unit loads with -include. Include guards, not #pragma once: this file
// is also compiled as a main file, where #pragma once warns.
#ifndef PYPTO_KERNEL_UNIT_HPP
#define PYPTO_KERNEL_UNIT_HPP

// The launch runtime's heavy members are compiled once, in the runtime unit (cpu_runtime_impl.hpp).
#define PYPTO_RT_SEPARATE 1

#include <cstdint>
#include <pto/pto-inst.hpp>
#include <pypto/kernel_support.hpp>
#include <pypto/cpu_runtime.hpp>

#endif
