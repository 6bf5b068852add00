"""An event source for clusters without Knative: watches job kinds, posts CloudEvents."""
