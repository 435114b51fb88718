"""The client's side: picklable handles on a hosted buffer, and the surface they forward."""
