"""olmoablate.report"""
