"""Langflow flows (DESIGN §11): a Langflow export is accepted wherever a flow spec is (it is
converted once, where a flow's text or data becomes a spec: :func:`signoff.engine.spec.flow_document`)
and a stored flow can be written back as one.

- :mod:`.kinds`: the Langflow components signoff runs and what becomes of each field and output;
- :mod:`.importer`: a Langflow export -> a signoff spec (:func:`from_langflow`), or every problem;
- :mod:`.exporter`: a signoff spec -> a Langflow export (:func:`to_langflow`).

No Temporal, no HTTP, and no import of the spec or the components: the spec module calls this one.
"""

from __future__ import annotations

from signoff.engine.langflow.exporter import to_langflow
from signoff.engine.langflow.importer import LangflowUnsupported, from_langflow, is_langflow
from signoff.engine.langflow.kinds import SUPPORTED, tweak_names

__all__ = ["SUPPORTED", "LangflowUnsupported", "from_langflow", "is_langflow", "to_langflow", "tweak_names"]
