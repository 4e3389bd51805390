"""`python -m tests.support.fake_provider`: the fake provider on a port, running a scripted
session (see `app.main`)."""

from tests.support.fake_provider.app import main

main()
