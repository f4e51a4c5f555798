"""The workers' signatures on status-bearing records (runtime.log.records.signing), on real encoded records."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runtime.config import Settings
from runtime.log.records.chain import START, ChainKey, first_break, link_of, seal
from runtime.log.records.events import Event, RunCompleted, RunStarted, SignalReceived, ToolCallCompleted
from runtime.log.records.signing import (
    SIGNED_TYPES,
    BadKey,
    UnsignableRecord,
    Vouching,
    public_text,
    sign,
    signature_of,
    signed_by,
    signing_key_of,
    verify_key_of,
)
from runtime.log.schemas.catalog import load_catalog
from runtime.log.schemas.serde import Serde

pytestmark = pytest.mark.unit

CHAIN = ChainKey(b"worker chain key")
SIGNER = Ed25519PrivateKey.generate()
PUBLIC = SIGNER.public_key()
RUN = "run-1"


@pytest.fixture(scope="module")
def serde() -> Serde:
    return Serde.offline(Settings())


def _written(serde: Serde, events: list[Event], run: str = RUN) -> list[bytes]:
    """As a worker writes them: each status record signed, then every record sealed."""
    values, tip = [], START
    for event in events:
        value = serde.encode(event)
        if event.type in SIGNED_TYPES:
            value = sign(SIGNER, run.encode(), tip, value)
        value = seal(CHAIN, run.encode(), tip, value)
        tip = link_of(value) or START
        values.append(value)
    return values


def _run(result: str = '{"refunded": 41.6}') -> list[Event]:
    return [
        RunStarted(run_id=RUN, seq=1, workflow="refund", input="{}", command_offset=0),
        ToolCallCompleted(run_id=RUN, seq=2, position=1, result='"ok"'),
        RunCompleted(run_id=RUN, seq=3, result=result),
    ]


def _verdicts(values: list[bytes], types: list[str]) -> list[str | None]:
    vouching = Vouching(PUBLIC, RUN)
    return [
        vouching.admit(value, kind, first=index == 0)
        for index, (value, kind) in enumerate(zip(values, types, strict=True))
    ]


def test_every_signed_schema_has_the_signature_just_before_the_chain() -> None:
    for name in SIGNED_TYPES:
        fields = [f["name"] for f in load_catalog()[name].parsed["fields"]]
        assert fields[-2:] == ["signature", "chain"], name


def test_a_signed_sealed_record_verifies_decodes_and_keeps_the_chain(serde: Serde) -> None:
    values = _written(serde, _run())
    assert first_break(CHAIN, RUN, values) is None  # the link covers the signature
    decoded = serde.decode(values[2], RUN.encode())
    assert isinstance(decoded, RunCompleted) and decoded.result == '{"refunded": 41.6}'
    assert len(decoded.signature) == 64 and decoded.chain == link_of(values[2])
    assert signed_by(PUBLIC, RUN.encode(), link_of(values[1]) or b"", values[2])
    assert not signed_by(PUBLIC, RUN.encode(), START, values[2])  # bound to the record before it
    assert not signed_by(PUBLIC, b"run-2", link_of(values[1]) or b"", values[2])  # and to its run
    assert signature_of(values[1]) is None  # other records carry none
    assert _verdicts(values, ["RunStarted", "ToolCallCompleted", "RunCompleted"]) == [None, None, None]
    # 65 bytes more on a signed record (the empty field took one), none on another
    assert len(values[2]) - len(seal(CHAIN, RUN.encode(), START, serde.encode(_run()[2]))) == 65


def test_signing_without_a_chain_key_still_verifies(serde: Serde) -> None:
    value = sign(SIGNER, RUN.encode(), START, serde.encode(_run()[0]))
    assert Vouching(PUBLIC, RUN).admit(value, "RunStarted", first=True) is None


def test_a_forged_ending_is_named_and_a_genuine_one_after_it_is_not(serde: Serde) -> None:
    genuine = _written(serde, _run())
    # The forger: well-formed, a valid-looking link, a signature field of its own -- no key.
    forged = seal(
        ChainKey(b"guess"), RUN.encode(), link_of(genuine[1]) or b"", serde.encode(_run('"forged"')[2])
    )
    unsigned = _verdicts(
        [genuine[0], genuine[1], forged, genuine[2]],
        ["RunStarted", "ToolCallCompleted", "RunCompleted", "RunCompleted"],
    )
    assert unsigned[2] == "it carries no worker's signature" and unsigned[3] is None
    other_signer = Ed25519PrivateKey.generate()
    badly = seal(
        CHAIN,
        RUN.encode(),
        START,
        sign(other_signer, RUN.encode(), link_of(genuine[1]) or b"", serde.encode(_run('"forged"')[2])),
    )
    verdicts = _verdicts([genuine[0], genuine[1], badly], ["RunStarted", "ToolCallCompleted", "RunCompleted"])
    assert verdicts[2] is not None and "signature is not a worker's" in verdicts[2]
    altered = genuine[2].replace(b"41.6", b"99.9")
    verdicts = _verdicts(
        [genuine[0], genuine[1], altered], ["RunStarted", "ToolCallCompleted", "RunCompleted"]
    )
    assert verdicts[2] is not None and "signature is not a worker's" in verdicts[2]


def test_a_copy_of_a_signed_record_and_a_record_after_the_end_are_named(serde: Serde) -> None:
    genuine = _written(serde, _run())
    late = serde.encode(SignalReceived(run_id=RUN, seq=4, name="go", payload="1", command_offset=0))
    verdicts = _verdicts(
        [*genuine, genuine[0], late],
        ["RunStarted", "ToolCallCompleted", "RunCompleted", "RunStarted", "SignalReceived"],
    )
    assert verdicts[:3] == [None, None, None]
    assert verdicts[3] == "a copy of a signed record before it"
    assert verdicts[4] is not None and "after the run's end" in verdicts[4]


def test_a_read_from_the_middle_of_a_run_judges_nothing(serde: Serde) -> None:
    genuine = _written(serde, _run())
    vouching = Vouching(PUBLIC, RUN)
    assert vouching.admit(genuine[2], "RunCompleted") is None and not vouching.complete


def test_keys_load_from_base64_and_pem_and_a_bad_one_is_named() -> None:
    raw = SIGNER.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    pem = SIGNER.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public_pem = PUBLIC.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    message = b"m"
    for text in (base64.b64encode(raw).decode(), pem):
        key = signing_key_of(text)
        assert key is not None
        for public in (verify_key_of(public_text(key)), verify_key_of(public_pem)):
            assert public is not None
            public.verify(key.sign(message), message)
    assert signing_key_of("") is None and verify_key_of("") is None
    with pytest.raises(BadKey, match=r"AGENTLOG_VERIFY_KEY.*16 bytes"):
        verify_key_of(base64.b64encode(b"x" * 16).decode())
    with pytest.raises(BadKey, match="AGENTLOG_SIGNING_KEY"):
        signing_key_of("not a key!")


def test_signing_needs_the_empty_fields_at_the_end(serde: Serde) -> None:
    sealed = seal(CHAIN, RUN.encode(), START, serde.encode(_run()[0]))
    with pytest.raises(UnsignableRecord):
        sign(SIGNER, RUN.encode(), START, sealed)


def test_an_unchained_signature_that_looks_like_a_link_still_verifies(serde: Serde) -> None:
    # 1 in 256 signatures has the link's length byte 9 bytes from the value's end: link_of reads
    # such an unchained value as chained; its signature is found all the same.
    for command_offset in range(20_000):
        record = RunStarted(run_id=RUN, seq=1, workflow="refund", input="{}", command_offset=command_offset)
        value = sign(SIGNER, RUN.encode(), START, serde.encode(record))
        if link_of(value) is not None:
            break
    assert link_of(value) is not None, "no signature with 0x10 at -9 in 20,000 tries"
    assert Vouching(PUBLIC, RUN).admit(value, "RunStarted", first=True) is None
