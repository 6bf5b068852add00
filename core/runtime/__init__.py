"""What every process shares at run time: settings read at start (config), structured logs, the Prometheus metrics it exports."""
