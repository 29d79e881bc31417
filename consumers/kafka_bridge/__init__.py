"""The Kafka bridge (``streamcrew kafka-bridge``, contract §11): requests topic -> lanes, results stream -> results topic.

A faust-streaming app. Only :mod:`consumers.kafka_bridge.app` imports faust, and only the CLI command
imports that module, so the bare install (no ``[kafka]`` extra) keeps working.
"""
