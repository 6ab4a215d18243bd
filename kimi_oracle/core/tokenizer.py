"""The oracle's test tokenizer: Kimi's four media tokens as one id each, other text as UTF-8 bytes.

Engines under test receive this tokenizer (docs/spec.md, "Request contract"). Every byte of
ordinary text is one id (0..255); the special tokens take the ids after them. `encode(text,
allowed_special="all")` turns each special token's text into its id; with `allowed_special` an
empty set (or any set without it) the token's text is encoded as its bytes, like any text.
"""

from __future__ import annotations

from typing import AbstractSet, Iterable, Literal

MEDIA_BEGIN = "<|media_begin|>"
MEDIA_CONTENT = "<|media_content|>"
MEDIA_END = "<|media_end|>"
MEDIA_PAD = "<|media_pad|>"
SPECIAL_TOKENS = (MEDIA_BEGIN, MEDIA_CONTENT, MEDIA_END, MEDIA_PAD)
# Ids after the 256 byte ids, in the order of SPECIAL_TOKENS.
FIRST_SPECIAL_ID = 256


class Tokenizer:
    """Byte-level ids with the four media tokens as single ids (`SPECIAL_TOKENS`)."""

    def __init__(self) -> None:
        self.special_ids = {tok: FIRST_SPECIAL_ID + i for i, tok in enumerate(SPECIAL_TOKENS)}
        self.special_tokens = {i: tok for tok, i in self.special_ids.items()}

    @property
    def media_pad_id(self) -> int:
        """The id of `<|media_pad|>`."""
        return self.special_ids[MEDIA_PAD]

    @property
    def vocab_size(self) -> int:
        """Byte ids plus the special ids."""
        return FIRST_SPECIAL_ID + len(SPECIAL_TOKENS)

    def convert_tokens_to_ids(self, token: str) -> int:
        """The id of a special token, or of a one-byte token; KeyError for anything else."""
        if token in self.special_ids:
            return self.special_ids[token]
        data = token.encode("utf-8")
        if len(data) == 1:
            return data[0]
        raise KeyError(f"{token!r} is not one token of the oracle's tokenizer")

    def encode(self, text: str, allowed_special: Literal["all"] | AbstractSet[str] = "all") -> list[int]:
        """Ids of `text`: allowed special tokens as their ids, everything else byte by byte."""
        allowed = set(SPECIAL_TOKENS) if allowed_special == "all" else set(allowed_special)
        out: list[int] = []
        at = 0
        while at < len(text):
            nxt = -1
            hit = ""
            for tok in allowed:
                k = text.find(tok, at)
                if k != -1 and (nxt == -1 or k < nxt):
                    nxt, hit = k, tok
            if nxt == -1:
                out.extend(text[at:].encode("utf-8"))
                break
            out.extend(text[at:nxt].encode("utf-8"))
            out.append(self.special_ids[hit])
            at = nxt + len(hit)
        return out

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`: special ids as their token text, byte runs as UTF-8 (invalid bytes
        replaced); an id outside the vocabulary reads `<|id:N|>`."""
        parts: list[str] = []
        run = bytearray()
        for i in ids:
            i = int(i)
            if 0 <= i < FIRST_SPECIAL_ID:
                run.append(i)
                continue
            if run:
                parts.append(run.decode("utf-8", errors="replace"))
                run = bytearray()
            parts.append(self.special_tokens.get(i, f"<|id:{i}|>"))
        if run:
            parts.append(run.decode("utf-8", errors="replace"))
        return "".join(parts)


__all__ = ["FIRST_SPECIAL_ID", "MEDIA_BEGIN", "MEDIA_CONTENT", "MEDIA_END", "MEDIA_PAD", "SPECIAL_TOKENS",
           "Tokenizer"]
