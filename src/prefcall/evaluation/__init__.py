"""prefcall.evaluation"""
