"""The RBAC and the manifests, deploy-time tooling no decision needs: each component's API
permissions (`permissions`), jobttl's own virtual API that RBAC answers for the console and the read
API (`rights`), manifests (`manifests`).
"""
