"""Crypto-shredding: run contents sealed under data keys kept apart, so erasing means losing a key.

By job: ``keys`` (the keys topic: the data keys, one way to get one per purpose), ``cipher`` (AES-GCM
under one key), ``sealer`` (records sealed before encoding and opened after decoding) and
``submitter`` (the keys of the commands a client writes). docs/erasure.md tells the whole story.
What a sealed value looks like and which record fields hold contents is the records' own format
(:mod:`runtime.log.records.sealed_form`): the payloads reader recognises sealed bytes without
depending on this package, so sealing sits above the records, never beside them.
"""
