"""Crypto-shredding: run contents sealed under data keys kept apart, so erasing means losing a key.

By job: ``form`` (the sealed form of a value, key ids, which record fields hold contents),
``keys`` (the keys topic: the data keys, one way to get one per purpose), ``cipher`` (AES-GCM
under one key), ``sealer`` (records sealed before encoding and opened after decoding) and
``submitter`` (the keys of the commands a client writes). docs/erasure.md tells the whole story.
"""
