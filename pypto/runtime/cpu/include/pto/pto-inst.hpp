// pypto's own header-only CPU implementation of the PTO tile API subset that pypto's code
// generator emits. Generated kernels include <pto/pto-inst.hpp>: with this directory on the
// include path they run natively on the CPU (pypto's `cpu` backend); with the public pto-isa
// headers instead they build for the NPU (or pto-isa's own -D__CPU_SIM simulation).
#pragma once

#define PYPTO_CPU_PTO 1

#include "cpu/types.hpp"
#include "cpu/core.hpp"
#include "cpu/tile.hpp"
#include "cpu/elementwise.hpp"
#include "cpu/vector_ops.hpp"
#include "cpu/reduce_ops.hpp"
#include "cpu/memory_ops.hpp"
#include "cpu/matmul.hpp"
