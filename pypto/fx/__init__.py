"""Import of torch FX graphs of ATen ops into pypto (for the torch.compile backend, pypto/dynamo.py):
meta (FakeTensor sizes and dtypes), rules (ATen op -> pypto functions), locations (user source lines),
convert (FX graph -> TensorGraph), probe (which nodes a lowered backend compiles)."""
