"""Every model API format Toolgate speaks, by the name callers give it.

The one list of formats: the catalog's `?format=`, the calls endpoint's
`format`, their help texts and error messages are all read from `CODECS`, so a
new format is one adapter module (see runner/wire/common.py's `WireCodec`)
and one entry here. The order is the order the API documents them in.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from runner.wire import anthropic, openai, openai_responses
from runner.wire.common import WireCodec

CODECS: Mapping[str, WireCodec] = MappingProxyType(
    {codec.name: codec for codec in (openai.CODEC, openai_responses.CODEC, anthropic.CODEC)}
)
FORMAT_NAMES: tuple[str, ...] = tuple(CODECS)
# "openai, openai_responses or anthropic": what a refused format name is told it must be.
FORMAT_NAMES_IN_WORDS = ", ".join(FORMAT_NAMES[:-1]) + " or " + FORMAT_NAMES[-1]
CATALOG_FORMATS_HELP = "; ".join(f"`{codec.name}`: {codec.catalog_doc}" for codec in CODECS.values())
TURN_FORMATS_HELP = "; ".join(f"`{codec.name}`: {codec.turn_doc}" for codec in CODECS.values())
