"""Resolving a job's effective limits and notifier (domain/queue_defaults.py): the job's
own value, else its queue's, else the daemon's config."""

from __future__ import annotations

from jobctl.domain.notify import NotifyDefaults
from jobctl.domain.queue_defaults import merged, notifier, sources, with_queue_limits
from jobctl.domain.resources import Resources
from tests.contract.test_http_contract import REQ
from tests.unit.test_notify import dead

GIB = 1 << 30


def test_limits_merge_one_by_one_the_jobs_own_first() -> None:
    own, queued = Resources(nice=3), Resources(nice=10, memory_max=GIB)
    assert merged(own, queued) == Resources(3, GIB)
    assert merged(None, queued) == queued and merged(own, None) == own
    assert merged(None, None) is None and merged(Resources(), None) is None
    assert sources(own, "batch", queued) == {"nice": "job", "memory_max": "queue batch"}
    assert sources(None, "batch", None) == {}


def test_the_notifier_is_the_jobs_then_the_queues_then_the_configs() -> None:
    config = {"batch": "config-queue"}
    assert notifier("own", "batch", "set", config, "default") == ("own", "job")
    assert notifier(None, "batch", "set", config, "default") == ("set", "queue batch")
    assert notifier(None, "batch", None, config, "default") == (
        "config-queue",
        "config notify.queues.batch",
    )
    assert notifier(None, "other", None, config, "default") == (
        "default",
        "config notify.on_failure",
    )
    assert notifier(None, "other", None, None, None) == (None, None)
    d = NotifyDefaults("daemon-cmd", {"reports": "queue-cmd"})
    assert d.command_of(dead(queue="reports"), "set-by-api") == "set-by-api"
    assert d.resolve(dead(queue="reports"), None) == ("queue-cmd", "config notify.queues.reports")


def test_a_claimed_job_gets_its_queues_limits_an_http_job_none() -> None:
    queued = Resources(nice=10, memory_max=GIB)
    job = with_queue_limits(dead(queue="batch", resources=Resources(nice=3)), queued)
    assert job.spec.resources == Resources(3, GIB) and job.spec.queue == "batch"
    assert with_queue_limits(dead(), None).spec.resources is None
    web = dead(command=(), http=REQ)
    assert with_queue_limits(web, queued) is web  # no command: no limits to fill
