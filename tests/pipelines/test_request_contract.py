"""The request contract's pieces against hand calculations: tokenizer, expansion, offsets, ranks,
scenarios (JSON round trip, shrinking steps)."""

from __future__ import annotations

import dataclasses

import pytest

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.core.tokenizer import Tokenizer
from kimi_oracle.inputs.draw import RandomSource
from kimi_oracle.inputs.scenarios import Scenario, ScenarioOptions, draw_scenario
from kimi_oracle.pipelines.request_contract import assign_ranks, expand, expected_request

BEGIN, CONTENT, END, PAD = 256, 257, 258, 259  # the tokenizer's documented ids after the 256 bytes


def test_tokenizer_special_tokens_are_single_ids_and_text_is_utf8_bytes():
    tok = Tokenizer()
    assert tok.media_pad_id == PAD
    assert [tok.convert_tokens_to_ids(t) for t in ("<|media_begin|>", "<|media_content|>", "<|media_end|>",
                                                   "<|media_pad|>")] == [BEGIN, CONTENT, END, PAD]
    assert tok.encode("a<|media_pad|>é", allowed_special="all") == [97, PAD, 0xC3, 0xA9]
    # Not allowed: the token's text is plain bytes.
    assert tok.encode("<|media_pad|>", allowed_special=set()) == list(b"<|media_pad|>")
    assert tok.decode([97, PAD, 0xC3, 0xA9]) == "a<|media_pad|>é"
    with pytest.raises(KeyError):
        tok.convert_tokens_to_ids("ab")


def test_k3_expansion_of_one_image_by_hand():
    # 30x20 under k3: 30 // 14 = 2, 20 // 14 = 1, budget 65536: no resize; padded to 56x28
    # (multiples of 28): grid (1, 2, 4), tokens (28 // 28) * (56 // 28) = 2.
    tok = Tokenizer()
    exp = expected_request([65, PAD, 66], [(30, 20)], PreprocessConfig.k3(), tok, "k3")
    head = [BEGIN] + list(b"image 30x20") + [CONTENT]
    assert list(exp.input_ids) == [65] + head + [PAD, PAD] + [END, 66]
    assert exp.grids == ((1, 2, 4),)
    assert exp.offsets == ((1 + len(head), 1 + len(head) + 1),)  # (14, 15)
    assert exp.offsets == ((14, 15),)


def test_k25_expansion_is_pads_only_and_fixed_tokens_win():
    tok = Tokenizer()
    cfg = dataclasses.replace(PreprocessConfig.k3(), fixed_output_tokens=3)
    ids, offsets = expand([PAD, PAD], [(5, 5), (7, 7)], [3, 1], tok, "k25")
    assert ids == [PAD] * 4 and offsets == [(0, 2), (3, 3)]
    exp = expected_request([PAD], [(30, 20)], cfg, tok, "k3")
    assert exp.input_ids.count(PAD) == 3 and exp.grids == ((1, 2, 4),)


def test_expansion_refuses_a_placeholder_count_that_does_not_match():
    with pytest.raises(InputError, match="1 media placeholder"):
        expand([PAD], [(1, 1), (2, 2)], [1, 1], Tokenizer())


def test_rank_balancer_by_hand():
    # prods 4, 8, 8, 2, 1: order 1, 2, 0, 3, 4 (largest first, stable); ranks: 1 -> r0 (8),
    # 2 -> r1 (8), 0 -> r0 (12, tie to the lowest), 3 -> r1 (10), 4 -> r1 (11).
    grids = [(1, 2, 2), (1, 2, 4), (1, 4, 2), (1, 1, 2), (1, 1, 1)]
    assert assign_ranks(grids, 2) == [[1, 0], [2, 3, 4]]
    assert assign_ranks(grids, 1) == [[1, 2, 0, 3, 4]]


def test_scenarios_round_trip_and_shrink_to_valid_scenarios():
    base = PreprocessConfig.k3()
    options = ScenarioOptions(paths=("deferred", "eager"), mixed_configs=True)
    for seed in range(20):
        sc = draw_scenario(RandomSource(seed), base, options)
        sc.validate()
        assert 1 <= len(sc.requests) <= 8 and 1 <= sc.dp_size <= 4 and 1 <= len(sc.chunks()) <= 3
        assert all(1 <= len(r.images) <= 6 for r in sc.requests)
        again = Scenario.from_dict(sc.to_dict())
        assert again.to_dict() == sc.to_dict()
        for smaller in sc.smaller():
            smaller.validate()
            assert sum(len(c) for c in smaller.chunks()) == len(smaller.members()) + smaller.repeat


def test_scenarios_repeat_images_and_cut_across_requests():
    base = PreprocessConfig.k3()
    drawn = [draw_scenario(RandomSource(s), base, ScenarioOptions()) for s in range(60)]
    assert any(len(sc.members()) > len(sc.images) for sc in drawn)  # cache hits
    assert any(len(sc.chunks()) > 1 for sc in drawn)
    assert any(len(sc.configs) > 1 for sc in drawn)
    assert any(r.texts[0] == "" for sc in drawn for r in sc.requests)  # a placeholder first
    assert any(sc.order for sc in drawn) and any(sc.repeat for sc in drawn)  # any order, repeats


def test_a_scenario_replays_from_its_choices_and_hypothesis_draws_and_shrinks_them():
    from hypothesis import HealthCheck, find, settings

    from kimi_oracle.inputs.draw import ChoiceSource
    from kimi_oracle.inputs.strategies import scenarios

    base = PreprocessConfig.k3()
    options = ScenarioOptions(paths=("deferred", "eager"))
    source = RandomSource(5)
    sc = draw_scenario(source, base, options)
    assert draw_scenario(ChoiceSource(source.choices), base, options) == sc  # the same integers, the same scenario
    # Hypothesis over the same draw: the smallest scenario with two requests is two requests of one image.
    small = find(scenarios(base, options), lambda s: len(s.requests) >= 2,
                 settings=settings(max_examples=200, database=None, suppress_health_check=list(HealthCheck)))
    assert len(small.requests) == 2 and all(len(r.images) == 1 for r in small.requests)
