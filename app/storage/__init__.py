"""Storage: the models, schema steps, the database and its statements, group commit,
retention and backup; imports only the base modules."""
