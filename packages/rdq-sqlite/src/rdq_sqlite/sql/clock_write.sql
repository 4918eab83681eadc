UPDATE clock SET now_us = ? WHERE one = 1
