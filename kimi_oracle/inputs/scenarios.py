"""Request scenarios: several requests of several images, served by one engine, drawn over a source.

A `Scenario` is what the scenario fuzzer (`fuzzers.scenario_fuzz`) plays on an engine: 1-8
requests of 1-6 images each (images from the existing input space at small sizes, the same image
repeated within and across requests so that the engine's cache hits), each image routed over one
of the engine's paths, each request prepared under one of 1-3 configurations (a `configure` before
it when the config in force differs: another patch budget, side cap or fixed token count; with
`mixed_configs` also mean, std and background), prompts that put a placeholder first, last, next
to another or between text; then the batch encoded over `dp_size` 1-4 ranks in one call or in 2-3
calls cutting across requests (chunked prefill), each call's items in request order, reversed or
rotated, one call in five also encoding an item twice.

`draw_scenario(source, base, options)` draws one over the same integer sources as `inputs.draw`
(`RandomSource` for the fast loop): each choice lists its simplest option first. Shrinking is
structural (`Scenario.smaller()`): fewer requests, images, ranks, chunks and configurations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from PIL import Image

from kimi_oracle.core.config import PATTERNS, PreprocessConfig
from kimi_oracle.core.tokenizer import MEDIA_PAD
from kimi_oracle.inputs.draw import Source, choice, draw_image, image_choices
from kimi_oracle.inputs.generators import CONTENTS, MODES, NORMALIZATIONS, CaseParams, make_image, vary_config
from kimi_oracle.pipelines.request_contract import Step

# Text between placeholders: the empty text first (a placeholder first, last or next to another).
TEXTS = ("", "Describe ", " and ", "\n", "图像 ", "what differs? ")
SCENARIO_LIMITS = (1, 2, 4, 6, 8, 12, 16, 24, 64, 256)
SCENARIO_FIXED_TOKENS = (None, 1, 3, 16)
SCENARIO_VERSION = 1


@dataclass(frozen=True)
class ScenarioOptions:
    """What scenarios are drawn from."""

    paths: tuple[str, ...] = ("default",)
    configurable: bool = True
    mixed_configs: bool = False
    max_requests: int = 8
    max_images: int = 6
    max_side: int = 40
    max_dp: int = 4
    modes: tuple[str, ...] = MODES


@dataclass(frozen=True)
class ScenarioRequest:
    """One request: `texts` around its placeholders (one more than images), its images (numbers
    into `Scenario.images`), each image's path, and its config (a number into `Scenario.configs`)."""

    texts: tuple[str, ...]
    images: tuple[int, ...]
    paths: tuple[str, ...]
    config: int = 0

    def prompt(self) -> str:
        """The prompt text: one `<|media_pad|>` per image, between the texts."""
        out = self.texts[0]
        for text in self.texts[1:]:
            out += MEDIA_PAD + text
        return out


@dataclass(frozen=True)
class Scenario:
    """Requests served by one engine (configs[0] is the engine's initial config)."""

    configs: tuple[PreprocessConfig, ...]
    images: tuple[CaseParams, ...]
    requests: tuple[ScenarioRequest, ...]
    cuts: tuple[int, ...] = ()  # item positions (request order) where a new encode call starts
    dp_size: int = 1
    framing: str = "k3"
    order: int = 0  # each encode call's items: 0 in request order, 1 reversed, 2 rotated by one
    repeat: bool = False  # the first call also encodes its first item again, at its end

    def members(self) -> list[tuple[int, int]]:
        """Every (request, image) in request order."""
        return [(r, i) for r, req in enumerate(self.requests) for i in range(len(req.images))]

    def chunks(self) -> list[list[tuple[int, int]]]:
        """The encode calls' members."""
        items = self.members()
        bounds = [0, *[c for c in self.cuts if 0 < c < len(items)], len(items)]
        calls = [items[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
        if self.order == 1:
            calls = [c[::-1] for c in calls]
        elif self.order == 2:
            calls = [c[1:] + c[:1] for c in calls]
        if self.repeat and calls:
            calls[0] = calls[0] + calls[0][:1]
        return calls

    def make_images(self) -> list[Image.Image]:
        """The image table, built from the parameters."""
        return [make_image(p) for p in self.images]

    def steps(self, tokenizer: Any) -> list[Step]:
        """The program: configure/prepare per request in order, then the encode calls."""
        out: list[Step] = []
        current = 0
        for r, req in enumerate(self.requests):
            if req.config != current:
                out.append(Step("configure", config=self.configs[req.config]))
                current = req.config
            out.append(Step("prepare", request=r, prompt_ids=tuple(tokenizer.encode(req.prompt(), allowed_special="all")),
                            images=req.images, paths=req.paths))
        out += [Step("encode", members=tuple(c), dp_size=self.dp_size) for c in self.chunks()]
        return out

    # -- JSON ---------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (`scenario.json`)."""
        return {
            "version": SCENARIO_VERSION,
            "framing": self.framing, "dp_size": self.dp_size, "cuts": list(self.cuts), "order": self.order,
            "repeat": self.repeat,
            "configs": [{"profile": c.name, "config": c.to_hf_json()} for c in self.configs],
            "images": [p.to_dict() for p in self.images],
            "requests": [{"prompt": r.prompt(), "texts": list(r.texts), "images": list(r.images),
                          "paths": list(r.paths), "config": r.config} for r in self.requests],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Scenario":
        """Inverse of `to_dict`; ValueError (or ConfigError) when it does not describe a scenario."""
        configs = tuple(dataclasses.replace(PreprocessConfig.from_hf_json(c["config"]), name=str(c.get("profile")
                                            or "custom")) for c in data["configs"])
        images = tuple(CaseParams.from_dict(p) for p in data["images"])
        requests = tuple(ScenarioRequest(tuple(map(str, r["texts"])), tuple(int(k) for k in r["images"]),
                                         tuple(map(str, r["paths"])), int(r["config"])) for r in data["requests"])
        out = cls(configs, images, requests, tuple(int(c) for c in data.get("cuts", ())), int(data["dp_size"]),
                  str(data.get("framing", "k3")), int(data.get("order", 0)), bool(data.get("repeat", False)))
        out.validate()
        return out

    def validate(self) -> None:
        """ValueError when the parts do not fit together."""
        if not self.configs or not self.requests or not 1 <= self.dp_size <= 64 or self.order not in (0, 1, 2):
            raise ValueError("a scenario needs a config, a request, 1..64 ranks and an order 0..2")
        for r, req in enumerate(self.requests):
            if len(req.texts) != len(req.images) + 1 or len(req.paths) != len(req.images) or not req.images:
                raise ValueError(f"request {r}: texts, images and paths do not fit")
            if not all(0 <= k < len(self.images) for k in req.images) or not 0 <= req.config < len(self.configs):
                raise ValueError(f"request {r}: an image or config number is out of range")

    def describe(self) -> list[str]:
        """One line per request and image, for terminals and reports."""
        lines = [f"{len(self.requests)} request(s), {len(self.members())} image(s), dp_size {self.dp_size}, "
                 f"{len(self.chunks())} encode call(s) {[len(c) for c in self.chunks()]}"
                 + (", reversed" if self.order == 1 else ", rotated" if self.order == 2 else "")
                 + (", first item repeated" if self.repeat else "") + f", framing {self.framing}"]
        for r, req in enumerate(self.requests):
            c = self.configs[req.config]
            lines.append(f"request {r}: config {req.config} (budget {c.in_patch_limit}, side "
                         f"{c.patch_limit_on_one_side}, fixed tokens {c.fixed_output_tokens}), prompt {req.prompt()!r}")
            for i, (k, path) in enumerate(zip(req.images, req.paths)):
                lines.append(f"  image {i}: #{k} {self.images[k].describe()} via {path}")
        return lines

    # -- shrinking ----------------------------------------------------------------------------

    def compact(self) -> "Scenario":
        """The same scenario without unused images and configs."""
        used = sorted({k for req in self.requests for k in req.images})
        cfgs = sorted({0} | {req.config for req in self.requests})
        imap = {k: n for n, k in enumerate(used)}
        cmap = {k: n for n, k in enumerate(cfgs)}
        reqs = tuple(dataclasses.replace(req, images=tuple(imap[k] for k in req.images), config=cmap[req.config])
                     for req in self.requests)
        return dataclasses.replace(self, images=tuple(self.images[k] for k in used),
                                   configs=tuple(self.configs[k] for k in cfgs), requests=reqs)

    def smaller(self) -> Iterator["Scenario"]:
        """Scenarios one step smaller: a request, an image, a rank, a chunk or a config less."""
        reqs = self.requests
        for r in range(len(reqs)):
            if len(reqs) > 1:
                yield dataclasses.replace(self, requests=reqs[:r] + reqs[r + 1:], cuts=()).compact()
        if self.repeat:
            yield dataclasses.replace(self, repeat=False)
        if self.order:
            yield dataclasses.replace(self, order=0)
        if self.cuts:
            for k in range(len(self.cuts)):
                yield dataclasses.replace(self, cuts=self.cuts[:k] + self.cuts[k + 1:])
        if self.dp_size > 1:
            yield dataclasses.replace(self, dp_size=1)
            if self.dp_size > 2:
                yield dataclasses.replace(self, dp_size=self.dp_size - 1)
        for r, req in enumerate(reqs):
            for i in range(len(req.images)):
                if len(req.images) > 1:
                    texts = req.texts[:i] + (req.texts[i] + req.texts[i + 1],) + req.texts[i + 2:]
                    one = ScenarioRequest(texts, req.images[:i] + req.images[i + 1:], req.paths[:i] + req.paths[i + 1:],
                                          req.config)
                    yield dataclasses.replace(self, requests=reqs[:r] + (one,) + reqs[r + 1:], cuts=()).compact()
            if any(req.texts):
                yield self._with(r, dataclasses.replace(req, texts=tuple("" for _ in req.texts)))
            if req.config != 0:
                yield self._with(r, dataclasses.replace(req, config=0)).compact()

    def _with(self, r: int, req: ScenarioRequest) -> "Scenario":
        return dataclasses.replace(self, requests=self.requests[:r] + (req,) + self.requests[r + 1:])


# ---------------------------------------------------------------------------------------------
# the draw


def _variant(source: Source, base: PreprocessConfig, mixed: bool) -> PreprocessConfig:
    m = base.merge_kernel_size
    caps = (base.patch_limit_on_one_side,) + tuple(k * m for k in (1, 2, 3, 4, 8))
    changes: dict[str, Any] = {
        "in_patch_limit": choice(source, (base.in_patch_limit,) + SCENARIO_LIMITS),
        "patch_limit_on_one_side": choice(source, caps),
        "fixed_output_tokens": choice(source, (base.fixed_output_tokens,) + SCENARIO_FIXED_TOKENS),
    }
    if mixed:
        changes["image_mean"], changes["image_std"] = choice(source, ((base.image_mean, base.image_std),)
                                                             + NORMALIZATIONS)
        if base.transparent_bg_config is not None:
            changes["background"] = {"pattern": choice(source, (base.transparent_bg_config.pattern,) + PATTERNS)}
    return vary_config(base, **changes)


def _request(source: Source, table: list[CaseParams], options: ScenarioOptions, n_configs: int,
             base: PreprocessConfig) -> ScenarioRequest:
    count = source.integer(1, options.max_images)
    square = base.transparent_bg_config.chessboard_square_size if base.transparent_bg_config else 8
    choices = image_choices(tuple(options.modes), None, CONTENTS, square)
    images, paths = [], []
    for _ in range(count):
        again = source.integer(0, len(table)) if table else 0
        if again:
            images.append(again - 1)  # the same image again: a cache hit
        else:
            size = (source.integer(1, options.max_side), source.integer(1, options.max_side))
            table.append(draw_image(source, size, choices, request=False))
            images.append(len(table) - 1)
        paths.append(choice(source, options.paths))
    texts = tuple(choice(source, TEXTS) for _ in range(count + 1))
    return ScenarioRequest(texts, tuple(images), tuple(paths), source.integer(0, n_configs - 1))


def draw_scenario(source: Source, base: PreprocessConfig, options: ScenarioOptions = ScenarioOptions(),
                  framing: str = "k3") -> Scenario:
    """One scenario around `base` (its configs[0])."""
    dp_size = source.integer(1, max(1, options.max_dp))
    n_configs = source.integer(1, 3) if options.configurable else 1
    configs = (base,) + tuple(source.sub(_variant, base, options.mixed_configs) for _ in range(n_configs - 1))
    table: list[CaseParams] = []
    requests = tuple(source.sub(_request, table, options, n_configs, base)
                     for _ in range(source.integer(1, options.max_requests)))
    total = sum(len(r.images) for r in requests)
    calls = min(source.integer(1, 3), total)
    cuts = sorted({source.integer(1, total - 1) for _ in range(calls - 1)}) if total > 1 else []
    order = choice(source, (0, 0, 1, 2))
    repeat = source.integer(0, 4) == 4
    return Scenario(configs, tuple(table), requests, tuple(cuts), dp_size, framing, order, repeat)


__all__ = ["SCENARIO_VERSION", "Scenario", "ScenarioOptions", "ScenarioRequest", "TEXTS", "draw_scenario"]
