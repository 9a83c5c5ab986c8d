"""A fan-out/fan-in report (docs/howto/dependencies.md): one job per document counts its
words, in parallel on any worker; one final job, enqueued in the same call, waits for all
of them and builds the report from their results.

Run it against any driver offering ``dependencies`` (memory, PostgreSQL, MongoDB)::

    driver = jobcore.connect("postgresql://localhost/app")
    report = enqueue_report("weekly", {"a.txt": "...", "b.txt": "..."}, driver=driver)
    Worker(["parts", "reports"], driver=driver, registry=jobs).run()
"""

from __future__ import annotations

from typing import Any

from jobcore import JobContext, JobDriver, Registry, get_job_driver
from jobcore.records import Job

jobs = Registry()


@jobs.job(name="count_words", queue="parts", max_attempts=5)
def count_words(payload: dict[str, Any]) -> dict[str, Any]:
    """One part: its result is what the final job reads."""
    return {"doc": payload["doc"], "words": len(payload["text"].split())}


@jobs.job(name="word_report", queue="reports")
def word_report(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """The final job: it runs only once every part is done, so every part has its result."""
    parts = get_job_driver().introspect.parents(ctx.job.id)
    per_doc = {part.result["doc"]: part.result["words"] for part in parts}
    return {"title": payload["title"], "total": sum(per_doc.values()), "per_doc": per_doc}


def enqueue_report(title: str, docs: dict[str, str], *, driver: JobDriver | None = None) -> Job:
    """Store the parts and the final job in one call, all or nothing; answer the final job."""
    specs = [count_words.spec({"doc": name, "text": text}) for name, text in docs.items()]
    specs.append(word_report.spec({"title": title}, depends_on=range(len(specs))))
    *_, report = (driver or get_job_driver()).enqueue_many(specs)
    return report
