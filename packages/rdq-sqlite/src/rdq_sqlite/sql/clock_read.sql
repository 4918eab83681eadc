SELECT now_us FROM clock WHERE one = 1
