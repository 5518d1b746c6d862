"""zuke: release automation with durable runs."""
