"""``jobcore.connect`` refuses bad URLs with JC_URL_INVALID and never echoes a password."""

from __future__ import annotations

import pytest

import jobcore
from jobcore.errors import UrlInvalid, redact_url

SECRET = "s3cr3t-pw"

BAD_URLS = [
    f"postgresql://bob:{SECRET}@[unbalanced/db",
    f"mongodb://bob:{SECRET}@[unbalanced/db",
    f"mongodb://bob:{SECRET}@host:99999999/db",
    f"memory://bob:{SECRET}@somewhere",
    f"nosuchdb://bob:{SECRET}@host/db",
]


@pytest.mark.parametrize("url", BAD_URLS, ids=lambda u: u.split(":", 1)[0] + "-" + u.rsplit("@", 1)[1][:12])
def test_a_malformed_url_is_refused_coded_without_its_password(url: str) -> None:
    with pytest.raises(UrlInvalid) as refused:
        jobcore.connect(url)
    text = f"{refused.value} {refused.value.cause} {refused.value.fix}"
    assert SECRET not in text
    assert refused.value.fix


def test_redact_url_masks_every_password_and_keeps_the_rest() -> None:
    text = "tried postgresql://u:pw1@db:5432/x?sslmode=require then mongodb://v:pw2@m1,m2/y and memory://"
    assert redact_url(text) == (
        "tried postgresql://u:***@db:5432/x?sslmode=require then mongodb://v:***@m1,m2/y and memory://"
    )
    assert redact_url("postgresql://user@host/db") == "postgresql://user@host/db"
