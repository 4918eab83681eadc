"""The contract clauses, one class per area; :class:`rdq_compliance.StorageSuite` combines
them. Each test's name reads as the sentence of the contract it checks."""
