"""The compiler's passes, one module per pass (see pipeline.py for the order):

hints (tiling hints checked against the machine), decompose, canonicalize, autocast,
fusion (+ iterspace), tiling (+ storage, vector_tiling, vector_rules, cube_tiling, copy_tiling,
tile_choice), kernels (+ to_blocks), memory, sync; manager runs them with dumps and verification.

This package imports nothing at load time.
"""
