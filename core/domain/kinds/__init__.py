"""The job kinds: what a kind is (`model`), the built-in kinds and how kinds are named (`registry`),
declarations as data (`declarations`, over kinds.yaml and kinds.schema.json), their CEL expressions
(`cel`) and the check of their paths against a CRD (`crdcheck`).
"""
