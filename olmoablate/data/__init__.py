"""data: offline demo data — real English text and a tokenizer into OLMo-core token files.

``tokenizers`` (the vendored dolma2 tokenizer and the shipped 4,096-entry byte-level BPE, and
which one writes which dtype), ``corpus`` (where the demo's text comes from, in which order, and
the prepared folder's ``manifest.json`` with its check) and ``prepare`` (tokenize once, verify;
the ``olmoablate data prepare|check`` commands). Sits beside run: plan reads the token files it
writes through their manifest (:mod:`olmoablate.plan.tokens`).
"""
