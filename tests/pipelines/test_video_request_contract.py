"""The request contract with K2.5 chunks (issue 42, item 6): a chunk's placeholder expands to one
frame's tokens (never t times them), its offsets are its pad run, its grid (t, h, w). Counts by hand
from the spec: 1920x1080 -> 1032 tokens (docs/video.md), a 30x20 image -> 56x28 padded, 2 x 1 = 2."""

from __future__ import annotations

import pytest

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.core.tokenizer import Tokenizer
from kimi_oracle.pipelines.video_request import expected_media_request, video_prompt

K25 = PreprocessConfig.k25()
TOK = Tokenizer()


def test_a_chunk_and_an_image_expand_to_their_tokens():
    text = "A" + video_prompt(4, 2.0, K25) + "B<|media_pad|>"  # one chunk of 4 frames, then an image
    ids = TOK.encode(text)
    want = expected_media_request(ids, [(1920, 1080, 4), (30, 20)], K25, TOK)
    pad = TOK.media_pad_id
    assert want.input_ids.count(pad) == 1032 + 2
    (c0, c1), (i0, i1) = want.offsets
    assert c1 - c0 + 1 == 1032 and i1 - i0 + 1 == 2
    assert all(want.input_ids[k] == pad for k in range(c0, c1 + 1))
    assert want.grids == ((4, 48, 86), (1, 2, 4))
    head = TOK.encode("A" + "00:00:00.000<|media_begin|>video<|media_content|>")
    assert list(want.input_ids[:len(head)]) == head and c0 == len(head)


def test_placeholders_must_match_the_items():
    ids = TOK.encode(video_prompt(9, 2.0, K25))  # 9 sampled frames: 3 chunks, 3 pads
    assert ids.count(TOK.media_pad_id) == 3
    with pytest.raises(InputError, match="3 media placeholder"):
        expected_media_request(ids, [(64, 64, 4)], K25, TOK)
