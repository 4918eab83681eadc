-- Whether the queue has a control record or held tasks (wait_due's look then weighs them).
SELECT {controlled}
