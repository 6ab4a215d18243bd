"""Planner sources the planner tests load by path (imported by tests/oracle and tests/workflows/gate)."""

# The same arithmetic as spec §2, written here with one planted bug: round() instead of int().
ROUNDING_PLANNER = '''
import math
def plan(width, height, config):
    p, m = config.patch_size, config.merge_kernel_size
    L, S = config.in_patch_limit, config.patch_limit_on_one_side
    s1 = math.sqrt(L / (max(1.0, width // p) * max(1.0, height // p)))
    scale = min(1.0, s1, S * p / width, S * p / height)
    new_w = min(max(1, round(width * scale)), S * p)
    new_h = min(max(1, round(height * scale)), S * p)
    f = m * p
    pad_w, pad_h = (f - new_w % f) % f, (f - new_h % f) % f
    tokens = ((new_h + pad_h) // f) * ((new_w + pad_w) // f)
    if config.fixed_output_tokens is not None:
        tokens = config.fixed_output_tokens
    return {"num_tokens": tokens, "new_width": new_w, "new_height": new_h, "pad_width": pad_w, "pad_height": pad_h}
'''
