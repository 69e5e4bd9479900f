"""olmoablate.launch"""
