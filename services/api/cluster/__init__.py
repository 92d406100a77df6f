"""The cluster: nodes joining and leaving, nodes and GPUs with their health and history
(the monitor's, read here; a drain is a request to it), the services' own instances, and
virtual clusters (the API's: who may use which GPUs)."""
