"""User mistakes raise a pypto error that names the user's file and line, what was expected and what
was found (issue 2, item 9). Each case marks its offending line with ``# <- error``; the test checks
the exception type, that ``e.loc`` and ``str(e)`` point at that line of this file, and that the
message carries the expected and the found values."""
import inspect
import os

import pytest
import torch

import pypto
import pypto.nn as nn
import pypto.nn.functional as F

D = pypto.DYNAMIC


@pypto.jit
def rows8(x: pypto.Tensor[[D, 8], pypto.float32]):
    return x * 2.0


@pypto.jit
def same_rows(x: pypto.Tensor[[pypto.dynamic("N"), 8], pypto.float32],
              y: pypto.Tensor[[pypto.dynamic("N"), 8], pypto.float32]):
    return x + y


def traced(fn, *args):
    return pypto.jit(fn)(*args)


# ------------------------------------------------------------------ wrong rank / shape / dtype at call time
def wrong_rank():
    rows8(torch.randn(2, 3, 8))  # <- error


def wrong_static_dim():
    rows8(torch.randn(4, 9))  # <- error


def wrong_dtype():
    rows8(torch.randn(4, 8).half())  # <- error


def wrong_arguments():
    rows8(torch.randn(4, 8), torch.randn(4, 8))  # <- error


def inconsistent_dynamic_size():
    same_rows(torch.randn(3, 8), torch.randn(4, 8))  # <- error


def module_wrong_features():
    nn.Linear(16, 8)(torch.randn(3, 12))  # <- error


def module_state_dict_shape():
    nn.Linear(16, 8).load_state_dict({"weight": torch.zeros(16, 8), "bias": torch.zeros(8)})  # <- error


def module_missing_key():
    nn.Linear(16, 8).load_state_dict({"weight": torch.zeros(8, 16)})  # <- error


# ------------------------------------------------------------------ bad broadcast
def bad_broadcast():
    def body(x):
        return x + torch.randn(4, 5)  # <- error
    traced(body, torch.randn(4, 8))


def dynamic_sizes_that_may_differ():
    def body(x: pypto.Tensor[[pypto.dynamic("M"), 8], pypto.float32],
             y: pypto.Tensor[[pypto.dynamic("K"), 8], pypto.float32]):
        return x * y  # <- error
    traced(body, torch.randn(4, 8), torch.randn(4, 8))


# ------------------------------------------------------------------ reducing a missing dim
def reduce_missing_dim():
    def body(x):
        return x.sum(dim=2)  # <- error
    traced(body, torch.randn(4, 8))


def softmax_missing_dim():
    def body(x):
        return F.softmax(x, dim=-3)  # <- error
    traced(body, torch.randn(4, 8))


# ------------------------------------------------------------------ matmul K mismatch
def matmul_k_mismatch():
    def body(x):
        return x @ torch.randn(6, 3)  # <- error
    traced(body, torch.randn(4, 8))


def linear_in_features_mismatch():
    def body(x):
        return F.linear(x, torch.randn(3, 6))  # <- error
    traced(body, torch.randn(4, 8))


# ------------------------------------------------------------------ a non-tensor where a tensor is expected
def non_tensor_operand():
    def body(x):
        return pypto.exp("abc")  # <- error
    traced(body, torch.randn(4, 8))


def non_tensor_weight():
    def body(x):
        return F.linear(x, [[1.0] * 8])  # <- error
    traced(body, torch.randn(4, 8))


def non_tensor_parameter():
    pypto.Parameter([1.0, 2.0])  # <- error


def traced_value_as_argument():
    def body(x):
        return rows8(x)  # <- error
    traced(body, torch.randn(4, 8))


# ------------------------------------------------------------------ a symbolic size where a static one is required
def symbolic_normalized_dim():
    def body(x: pypto.Tensor[[4, D], pypto.float32]):
        return F.layer_norm(x, (8,))  # <- error
    traced(body, torch.randn(4, 8))


def symbolic_split():
    def body(x: pypto.Tensor[[D, 8], pypto.float32]):
        return pypto.split(x, [x.shape[0] - 1, 1], 0)  # <- error
    traced(body, torch.randn(4, 8))


def symbolic_len():
    def body(x: pypto.Tensor[[D, 8], pypto.float32]):
        return x * len(x)  # <- error
    traced(body, torch.randn(4, 8))


def symbolic_size_outside_a_trace():
    pypto.zeros(pypto.dynamic("T"), 8)  # <- error


# name: (case, error type, fragments that must appear in the message: what was expected, what was found)
CASES = {
    "wrong_rank": (wrong_rank, pypto.ShapeError, ["must have rank 2", "found shape [2, 3, 8]"]),
    "wrong_static_dim": (wrong_static_dim, pypto.ShapeError, ["dim 1 must be 8", "found shape [4, 9]"]),
    "wrong_dtype": (wrong_dtype, pypto.DTypeError, ["must be float32", "found torch.float16"]),
    "wrong_arguments": (wrong_arguments, pypto.TypeMismatchError, ["rows8", "too many positional arguments"]),
    "inconsistent_dynamic_size": (inconsistent_dynamic_size, pypto.SymbolicError,
                                  ["size 'N' is 3 in one argument and 4 in 'y'"]),
    "module_wrong_features": (module_wrong_features, pypto.ShapeError, ["has K=12", "has K=16"]),
    "module_state_dict_shape": (module_state_dict_shape, nn.StateDictError,
                                ["'weight': expected shape [8, 16]", "found [16, 8]"]),
    "module_missing_key": (module_missing_key, nn.StateDictError, ["missing key 'bias'"]),
    "bad_broadcast": (bad_broadcast, pypto.ShapeError, ["cannot broadcast shapes [4, 8] and [4, 5]", "8 in one and 5"]),
    "dynamic_sizes_that_may_differ": (dynamic_sizes_that_may_differ, pypto.ShapeError,
                                      ["[M, 8] and [K, 8]", "dynamic sizes must be the same symbol"]),
    "reduce_missing_dim": (reduce_missing_dim, pypto.ShapeError, ["dim 2 is out of range", "expected -2 <= dim < 2"]),
    "softmax_missing_dim": (softmax_missing_dim, pypto.ShapeError, ["-3 is out of range", "expected -2 <= dim < 2"]),
    "matmul_k_mismatch": (matmul_k_mismatch, pypto.ShapeError, ["[4, 8] has K=8", "[6, 3] has K=6"]),
    "linear_in_features_mismatch": (linear_in_features_mismatch, pypto.ShapeError, ["K=8", "K=6"]),
    "non_tensor_operand": (non_tensor_operand, pypto.TypeMismatchError, ["expected a pypto.Tensor", "found str"]),
    "non_tensor_weight": (non_tensor_weight, pypto.TypeMismatchError,
                          ["expected a pypto.Tensor for 'weight'", "found list"]),
    "non_tensor_parameter": (non_tensor_parameter, pypto.TypeMismatchError,
                             ["expected a torch tensor", "found list"]),
    "traced_value_as_argument": (traced_value_as_argument, pypto.TypeMismatchError,
                                 ["is a traced pypto.Tensor", "pass torch tensors"]),
    "symbolic_normalized_dim": (symbolic_normalized_dim, pypto.SymbolicError,
                                ["must be a static size", "found the symbolic size x_d1"]),
    "symbolic_split": (symbolic_split, pypto.SymbolicError, ["needs a static size", "dynamic size x_d0"]),
    "symbolic_len": (symbolic_len, pypto.SymbolicError, ["len()", "first dim is dynamic (x_d0)"]),
    "symbolic_size_outside_a_trace": (symbolic_size_outside_a_trace, pypto.SymbolicError,
                                      ["expected an int", "found the symbolic size T"]),
}


def marked_line(fn) -> int:
    lines, first = inspect.getsourcelines(fn)
    hits = [first + i for i, text in enumerate(lines) if text.rstrip().endswith("# <- error")]
    assert len(hits) == 1, f"{fn.__name__} must mark exactly one line"
    return hits[0]


@pytest.mark.parametrize("name", list(CASES))
def test_user_error_names_file_line_expected_found(name):
    case, exc_type, fragments = CASES[name]
    with pytest.raises(pypto.PyptoError) as info:
        case()
    e = info.value
    assert isinstance(e, exc_type), f"{type(e).__name__} is not a {exc_type.__name__}: {e}"
    line = marked_line(case)
    assert e.loc is not None and e.loc.file == __file__ and e.loc.line == line, f"reported at {e.loc}"
    text = str(e)
    assert f"{os.path.basename(__file__)}:{line}" in text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"


def test_errors_are_pypto_error_subclasses():
    for cls in (pypto.ShapeError, pypto.DTypeError, pypto.TypeMismatchError, pypto.SymbolicError, nn.StateDictError):
        assert issubclass(cls, pypto.PyptoError)
