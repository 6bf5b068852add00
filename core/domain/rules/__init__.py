"""The cluster policy an operator writes: its YAML reading (`config_yaml`), its rules and caps
(`policy`), its schema (policy.schema.json).
"""
