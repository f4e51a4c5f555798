"""A benchmark's scratch deployment is deleted when it is done (infra.topics.drop_topics), so a
sitting's later rounds do not measure a broker carrying every earlier round's partitions."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from infra.topics import drop_topics, wanted
from runtime.config import Settings
from support.services import make_deployment
from support.wait import wait_until

pytestmark = [pytest.mark.integration]


def topic_names(settings: Settings) -> set[str]:
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    return set(admin.list_topics(timeout=30).topics)


def test_a_scratch_deployment_s_topics_are_deleted_and_deleting_again_does_nothing(services: Settings) -> None:
    scratch = make_deployment(services)
    other = make_deployment(services)
    names = {spec.name for spec in wanted(scratch)}
    assert names <= topic_names(scratch)

    assert set(drop_topics(scratch)) == names
    # the controller has committed the deletion; the broker's metadata follows within moments
    wait_until(lambda: not names & topic_names(scratch), 15, "the deleted topics to leave the metadata")
    remaining = topic_names(scratch)
    assert {spec.name for spec in wanted(other)} <= remaining, "another deployment's topics were touched"
    assert drop_topics(scratch) == []  # already gone: nothing to delete, no error
    drop_topics(other)
