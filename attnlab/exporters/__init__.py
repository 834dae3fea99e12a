"""Exports that leave the lab: a trained model in another engine's format.

- ``attnlab.exporters.ctranslate2``: a Transformer as a CTranslate2 model directory
  (``model.bin``, ``config.json``, vocabularies, and attnlab's tokenizers beside them), with
  the refusals (``check_exportable``) and a translate helper that tokenises the attnlab way.

(The lab's own ``.safetensors`` export is ``attnlab.runs.export_checkpoint``.)
"""

from attnlab.exporters.ct2_check import check_exportable

__all__ = ["check_exportable"]
