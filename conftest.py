"""Root conftest: puts the repository's fixtures/ package on the path for jobcore's own run."""

pytest_plugins = ["fixtures.plugin"]
