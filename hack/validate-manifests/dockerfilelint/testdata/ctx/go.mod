module x
