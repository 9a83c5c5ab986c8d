"""Integrations with frameworks (:mod:`jobcore.contrib.django`); each needs its framework installed.

``import jobcore`` never imports this package, so jobcore itself depends on no framework.
"""
