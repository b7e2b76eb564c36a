"""What an engine may send back to the harvester, as pydantic models (PRODUCT.md §6: every
engine reply is validated before a number is taken from it).

`CompletionChunk` is one `data:` event of a streamed `/v1/completions` (or chat) reply;
`TokenizeReply` an engine's tokenize answer (vLLM/SGLang `{count, tokens}`, llama.cpp
`{tokens}`). The models ignore fields they do not use (`extra="ignore"`, unlike the
product's own files): engines add fields release by release, and only the ones read
here are checked. No NaN or infinity; token counts are bounded.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MAX_TOKEN_COUNT = 1 << 31


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


class ChunkDelta(_Reply):
    content: str | None = None


class ChunkChoice(_Reply):
    text: str | None = None
    delta: ChunkDelta | None = None
    finish_reason: str | None = None


class ChunkUsage(_Reply):
    prompt_tokens: int | None = Field(None, ge=0, le=MAX_TOKEN_COUNT)
    completion_tokens: int | None = Field(None, ge=0, le=MAX_TOKEN_COUNT)


class CompletionChunk(_Reply):
    """One `data:` event of a streamed completion."""

    choices: list[ChunkChoice] = []
    usage: ChunkUsage | None = None


class TokenizeReply(_Reply):
    """An engine's tokenize reply."""

    count: int | None = Field(None, ge=0, le=MAX_TOKEN_COUNT)
    tokens: list | None = None

    def num_tokens(self) -> int | None:
        if self.count is not None:
            return self.count
        return len(self.tokens) if self.tokens is not None else None
