"""Helpers the tests share: import them from here, never from conftest.py or another test module."""
