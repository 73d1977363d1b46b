"""The workflow runner's wrapper (workflows/caller.py) answers the SDK's serialization-context
question itself, without entering the sandbox, only for a data converter that no context can
change (signoff's): a converter with a context-aware part (a codec, say) is asked as before."""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import PayloadCodec, SerializationContext, StorageDriverStoreContext, WithSerializationContext

from signoff.workflows.caller import _CallerInstance, context_free


class _Codec(PayloadCodec, WithSerializationContext):
    def __init__(self, context: SerializationContext | None = None) -> None:
        self.context = context

    async def encode(self, payloads: Any) -> Any:
        return list(payloads)

    async def decode(self, payloads: Any) -> Any:
        return list(payloads)

    def with_context(self, context: SerializationContext) -> "_Codec":
        return _Codec(context)


class _Inner:
    def __init__(self) -> None:
        self.asked = 0

    def get_serialization_context(self, command_info: Any) -> Any:
        self.asked += 1
        return "the sandbox's answer"

    def get_external_store_context(self, command_info: Any) -> Any:
        self.asked += 1
        return "the sandbox's store context"


def test_signoffs_converter_is_context_free_and_one_with_a_context_aware_codec_is_not() -> None:
    assert context_free(pydantic_data_converter)
    assert not context_free(dataclasses.replace(pydantic_data_converter, payload_codec=_Codec()))


def test_the_sandbox_is_asked_only_when_the_converter_takes_a_context() -> None:
    inner = _Inner()
    free = _CallerInstance(inner, context_free=True)  # type: ignore[arg-type]
    assert free.get_serialization_context(None) is None
    assert free.get_external_store_context(None) == StorageDriverStoreContext(target=None)
    assert inner.asked == 0
    asked = _CallerInstance(inner)  # type: ignore[arg-type]
    assert asked.get_serialization_context(None) == "the sandbox's answer"
    assert asked.get_external_store_context(None) == "the sandbox's store context"
    assert inner.asked == 2
